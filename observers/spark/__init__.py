"""The Spark observer: change events into Delta Lake tables through a Spark session, a change
log written by every host and a current state kept by one host's state job."""
