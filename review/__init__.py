"""Everything a reviewer touches; `review.decide` is the one way a checkpoint gets decided."""

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
from review.decisions import NotDecidedAlone, decide

__all__ = [
    "AlreadyDecided",
    "DecisionError",
    "DecisionRecord",
    "ExecutionNotWaiting",
    "InvalidInput",
    "NotAwaitingReview",
    "NotDecidedAlone",
    "NotReviewer",
    "UnknownCheckpoint",
    "decide",
]
