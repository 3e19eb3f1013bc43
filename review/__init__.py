"""Everything a reviewer touches; `review.decide` is the one way a checkpoint gets decided
(`review.approve_alone`: its one-statement form for a plain approval)."""

from review.decision_errors import (
    AlreadyDecided,
    DecisionError,
    ExecutionNotWaiting,
    InvalidInput,
    NotAwaitingReview,
    NotReviewer,
    UnknownCheckpoint,
)
from review.decision_records import DecisionRecord
from review.decisions import approve_alone, decide

__all__ = [
    "AlreadyDecided",
    "DecisionError",
    "DecisionRecord",
    "ExecutionNotWaiting",
    "InvalidInput",
    "NotAwaitingReview",
    "NotReviewer",
    "UnknownCheckpoint",
    "approve_alone",
    "decide",
]
