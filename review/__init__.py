"""Everything a reviewer touches; `review.decide` is the one way a checkpoint gets decided."""

from review.decisions import (
    AlreadyDecided,
    DecisionError,
    DecisionRecord,
    ExecutionNotWaiting,
    InvalidInput,
    NotAwaitingReview,
    NotReviewer,
    UnknownCheckpoint,
    decide,
)

__all__ = [
    "AlreadyDecided",
    "DecisionError",
    "DecisionRecord",
    "ExecutionNotWaiting",
    "InvalidInput",
    "NotAwaitingReview",
    "NotReviewer",
    "UnknownCheckpoint",
    "decide",
]
