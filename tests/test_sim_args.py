"""The simulator loops' arguments are named once (``sim/_args.py``), whichever backend runs here."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

from autoplace.sim import _kernel
from autoplace.sim._args import C_ARRAYS, ClusterArrays, GraphArrays


def test_both_loops_take_the_arguments_named_in_one_place():
    """``sim/_args.py`` names the arguments once: the C loop's parameter list and its ``ap_arg_names``, and the
    numba kernel's parameters, are those names in that order."""
    src = (Path(_kernel.__file__).parent / "_csim.c").read_text()
    sig = re.search(r"int ap_simulate\(([^)]*)\)", src).group(1)
    params = [re.split(r"[\s*]+", p.strip())[-1] for p in sig.split(",")]
    assert params[:7] == ["B", "n", "T", "P", "D", "S", "H"] and params[7:] == list(C_ARRAYS)
    listed = "".join(re.findall(r'"([^"]*)"', re.search(r"ap_arg_names\(void\) \{(.*?)\}", src, re.S).group(1)))
    assert listed.split(",") == list(C_ARRAYS)
    numba = list(inspect.signature(_kernel.simulate_one.py_func).parameters)
    assert numba[:3] == ["dev", "spos", "optime"]
    assert numba[3:3 + len(GraphArrays._fields) + len(ClusterArrays._fields)] == [
        *GraphArrays._fields, *ClusterArrays._fields]
