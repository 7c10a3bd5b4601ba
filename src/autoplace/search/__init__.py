"""What every learned search shares: its options, runner and result, its budget and nominal work, scoring
with a cache and a failing signal, checkpoints, and the training curve."""

from autoplace.search.budget import SearchBudget
from autoplace.search.checkpoint import Checkpointer, load_checkpoint, save_checkpoint
from autoplace.search.curve import Curve, CurvePoint
from autoplace.search.evaluation import Evaluator, Scores, default_failing_step
from autoplace.search.runner import SearchOptions, SearchResult, learned_search

__all__ = ["SearchBudget", "Checkpointer", "load_checkpoint", "save_checkpoint", "Curve", "CurvePoint",
           "Evaluator", "Scores", "default_failing_step", "SearchOptions", "SearchResult", "learned_search"]
