"""The Spark observer: change events into a Spark session, as a change log and a current state."""
