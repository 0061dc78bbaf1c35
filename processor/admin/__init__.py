"""An operator's hand on a processor, as pure plans and reports: its status (`report`), a
stopped lease moved past a bad spot (`lease_moves`), a paused processor reset (`reset`), its
position as an SDK token (`processor_token`), and the Spark tables checked against the account
(`verify`, `history_check`).
"""

from typing import TYPE_CHECKING

from processor.faces import exports

if TYPE_CHECKING:
    from processor.admin.history_check import check_history
    from processor.admin.lease_moves import Past, plan_move
    from processor.admin.processor_token import plan_sdk_position
    from processor.admin.report import processor_status, render_status, status_json
    from processor.admin.reset import ResetPlan, ResetTo, plan_reset
    from processor.admin.verify import VerifyError, compare

__getattr__ = exports(__name__)
__all__ = [
    "Past",
    "ResetPlan",
    "ResetTo",
    "VerifyError",
    "check_history",
    "compare",
    "plan_move",
    "plan_reset",
    "plan_sdk_position",
    "processor_status",
    "render_status",
    "status_json",
]
