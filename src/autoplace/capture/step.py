"""Capture a training step (forward, backward, optimizer update) or a forward pass as an autoplace Graph.

How: ``make_fx(..., tracing_mode="fake")`` runs a function that calls the model through
``torch.func.functional_call``, differentiates the loss with ``torch.autograd.grad`` (autograd's backward
is traced as aten ops), and runs the user's optimizer class with ``foreach=False`` so that every
parameter gets its own update ops. The optimizer's state (Adam's moments, step counters ...) is found by
one step on fake tensors and passed in as graph inputs, so the captured update is the steady-state one.

Metadata: ``torch.fx.traceback.annotate`` tags every traced node with its ``phase`` and the owning
module path (``scope``: :mod:`autoplace.capture.scopes`). The traced aten graph becomes ops in
:mod:`autoplace.capture.fx_graph`; the optimizer's updates are grouped and fused in
:mod:`autoplace.capture.optimizer`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from autoplace.capture.fx_graph import to_graph
from autoplace.capture.inputs import (
    as_tuple,
    check_inputs,
    check_micro_batches,
    micro_batch,
    resolve_model,
    split_inputs,
)
from autoplace.capture.optimizer import (
    check_optimizer,
    fuse_updates,
    launch_groups,
    optimizer_groups,
    scheduled_inputs,
    state_layout,
    update_implementation,
)
from autoplace.capture.scopes import Scopes, grad_fn_tagger, scope_backward
from autoplace.capture.trace import trace_fake
from autoplace.errors import AutoplaceError, CaptureError
from autoplace.graph import Graph, Phase

__all__ = ["capture_training_step", "capture_inference"]


def capture_training_step(model, example_inputs: Any, loss_fn: Callable, optimizer, *,
                          targets: Any = None, name: str | None = None, micro_batches: int = 1,
                          batch_dim: int = 0) -> Graph:
    """Capture one training step of ``model`` as an autoplace Graph (nothing is computed).

    ``model``: an ``nn.Module`` or a ``torch.export`` ``ExportedProgram``; ``example_inputs``: one batch —
    a tensor, a tuple of positional arguments, a dict of keyword arguments, or ``(args, kwargs)``;
    ``loss_fn(outputs, *targets)`` must return a scalar; ``optimizer`` is a configured
    ``torch.optim`` optimizer over (some of) the model's parameters — its class and per-group
    hyper-parameters are reused with ``foreach=False`` so each parameter gets its own update ops, which
    are marked with the multi-tensor kernels PyTorch runs them in (``foreach``/``fused`` as configured,
    foreach on GPUs when unset: :func:`launch_groups`).
    Parameters and optimizer state become ops with ``param_bytes``; each parameter's update ops and the
    op producing its gradient share its ``colocation_group``, and ops writing a parameter or buffer in
    place join its group (:mod:`~autoplace.capture.fx_graph`).

    ``micro_batches=M`` captures gradient accumulation: every input and target tensor is cut along its
    first dimension (``batch_dim``: another, e.g. 1 for a ``[steps, batch]`` sequence) into ``M`` equal
    micro-batches, each runs forward and backward (its ops carry
    ``meta["micro_batch"]``), the gradients of ``loss / M`` are summed, and one update follows; the step's
    loss is the micro-batches' mean. With a mean-reduced loss that is the full batch's loss and gradient
    up to float reassociation; a BatchNorm normalises each micro-batch by its own statistics and updates
    its running statistics once per micro-batch, as eager gradient accumulation does.
    """
    import torch

    if isinstance(micro_batches, bool) or not isinstance(micro_batches, int) or micro_batches < 1:
        raise CaptureError(f"micro_batches must be a positive integer, got {micro_batches!r}")
    model, example_inputs = resolve_model(model, example_inputs)
    check_optimizer(optimizer)
    if not callable(loss_fn):
        raise CaptureError(f"loss_fn: expected a function loss_fn(outputs, *targets), got {type(loss_fn).__name__}")
    (inputs, kwargs), targets = split_inputs(example_inputs), as_tuple(targets)
    check_inputs(model, inputs, kwargs, targets)
    if micro_batches > 1:
        check_micro_batches(inputs, kwargs, targets, micro_batches, batch_dim)
    opt_cls, groups = optimizer_groups(model, optimizer)
    modes = [update_implementation(g) for g in optimizer.param_groups]
    all_params = dict(model.named_parameters())
    # a parameter with requires_grad=False gets no gradient, so the optimizer leaves it alone (as eager)
    kept_groups = [(kept, hyper, mode) for (names, hyper), mode in zip(groups, modes)
                   if (kept := [n for n in names if all_params[n].requires_grad])]
    groups, modes = [(n, h) for n, h, _ in kept_groups], [m for *_, m in kept_groups]
    trained = [n for names, _ in groups for n in names]
    params = {n: all_params[n].detach() for n in trained}
    frozen = {n: p.detach() for n, p in all_params.items() if n not in params}
    buffers = {n: b.detach() for n, b in model.named_buffers()}
    try:
        layout = state_layout(opt_cls, groups, params)
    except AutoplaceError:
        raise
    except Exception as e:  # noqa: BLE001 - an optimizer whose step fake tensors cannot run (ASGD)
        raise CaptureError(f"optimizer {opt_cls.__name__} cannot be captured: its step does not run on fake tensors "
                           f"({type(e).__name__})") from None
    state = {n: {k: torch.zeros(shape, dtype=dtype, device=device) for k, (shape, dtype, device) in layout[n].items()}
             for n in trained}
    hyper = scheduled_inputs(opt_cls, groups, layout)
    scopes = Scopes(model)
    step = _traced_step(model, loss_fn, scopes, opt_cls, groups, micro_batches, batch_dim)
    try:
        gm = trace_fake(step, (params, frozen, buffers, state, hyper, inputs, kwargs, targets),
                        f"{type(model).__name__} training step")
    finally:
        scopes.remove()
    graph = to_graph(gm, name or type(model).__name__, trained, list(frozen), list(buffers), layout, training=True,
                     hyper={n: {k: float(t) for k, t in h.items()} for n, h in hyper.items()})
    fused = fuse_updates(list(graph.ops), groups, modes, opt_cls.__name__, graph.meta["program"]["scalars"])
    graph = Graph(launch_groups(fused, groups, modes), name=graph.name,
                  meta={**graph.meta, "optimizer": {"class": opt_cls.__name__, "implementation": sorted(set(modes))},
                        **({"batch_dim": batch_dim} if micro_batches > 1 else {})})
    return _with_modules(_with_tied(graph, model), model)


def _traced_step(model, loss_fn: Callable, scopes: Scopes, opt_cls: type, groups: list, micro_batches: int,
                 batch_dim: int) -> Callable:
    """The function :func:`capture_training_step` traces: ``step(params, frozen, buffers, state, hyper,
    inputs, kwargs, targets) -> (loss, grads)``, its forward and backward passes (one per micro-batch) and
    the optimizer's update, each tagged with its phase."""
    import torch

    def pass_(live, frozen, buffers, inputs, kwargs, targets, scale):
        """One forward and backward pass: the loss and the gradients of ``loss * scale``."""
        import torch.fx.traceback as fxt

        with fxt.annotate({"phase": Phase.FORWARD}), grad_fn_tagger(scopes):
            out = torch.func.functional_call(model, {**live, **frozen, **buffers}, inputs, kwargs)
            with fxt.annotate({"scope": "loss"}):
                loss = loss_fn(out, *targets)
        if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
            got = f"a tensor of shape {tuple(loss.shape)}" if isinstance(loss, torch.Tensor) else type(loss).__name__
            raise CaptureError(f"loss_fn must return a scalar tensor (reduce it, e.g. .mean()), got {got}")
        with fxt.annotate({"phase": Phase.BACKWARD}):
            scope_backward([loss.grad_fn])
            grads = torch.autograd.grad(loss * scale if scale != 1 else loss, list(live.values()), allow_unused=True)
        return loss, grads

    def step(params, frozen, buffers, state, hyper, inputs, kwargs, targets):
        import torch.fx.traceback as fxt

        # every tag this capture sets, unset for the step as a whole: a trace that failed part-way (a
        # micro-batch too small for a BatchNorm) can leave torch's tracing context holding its last ones
        with fxt.annotate({"phase": None, "micro_batch": None}):
            return _step(params, frozen, buffers, state, hyper, inputs, kwargs, targets)

    def _step(params, frozen, buffers, state, hyper, inputs, kwargs, targets):
        import torch.fx.traceback as fxt

        live = {n: p.requires_grad_() for n, p in params.items()}
        if micro_batches == 1:
            loss, grads = pass_(live, frozen, buffers, inputs, kwargs, targets, 1)
        else:  # gradient accumulation: each micro-batch's pass, the gradients of loss / M summed
            losses, grads = [], None
            for m in range(micro_batches):
                with fxt.annotate({"micro_batch": m}):
                    cut = micro_batch((inputs, kwargs, targets), m, micro_batches, batch_dim)
                    loss_m, grads_m = pass_(live, frozen, buffers, *cut, 1.0 / micro_batches)
                    losses.append(loss_m.detach())
                    grads = list(grads_m) if grads is None else [
                        a if b is None else b if a is None else a + b for a, b in zip(grads, grads_m)]
            with fxt.annotate({"phase": Phase.FORWARD, "scope": "loss"}):
                loss = torch.stack(losses).mean()
        with fxt.annotate({"phase": Phase.UPDATE, "scope": "optimizer"}), torch.no_grad():
            # one param group per parameter, each reading its learning rate from its own input (as a Python
            # number, the way torch.optim reads it), so the update ops stay with their parameter
            opt = opt_cls([{**h, "params": [live[n]]} for names, h in groups for n in names], foreach=False)
            for group, n in zip(opt.param_groups, (n for names, _ in groups for n in names)):
                h = hyper.get(n, {})
                if "lr" in h:
                    group["lr"] = h["lr"].item()
                if "beta1" in h:
                    group["betas"] = (h["beta1"].item(), h["beta2"].item())
            for (n, p), g in zip(live.items(), grads):
                p.grad = g                         # None (unused in the loss): skipped, as eager skips it
                opt.state[p] = dict(state[n])
            opt.step()
        return loss, [g for g in grads]

    return step


def _with_modules(graph: Graph, model) -> Graph:
    """Record each module's class by path in ``graph.meta["modules"]`` (what ``keep_whole`` names, as
    Accelerate's ``no_split_module_classes``)."""
    graph.meta["modules"] = {path: type(m).__name__ for path, m in model.named_modules()}
    return graph


def _with_tied(graph: Graph, model) -> Graph:
    """Record parameters and buffers reachable under a second name (tied weights: an output layer sharing
    the embedding's matrix) in ``graph.meta["tied"]``: alias -> the name the graph has it under."""
    first: dict[int, str] = {}
    tied: dict[str, str] = {}
    for n, t in [*model.named_parameters(remove_duplicate=False), *model.named_buffers(remove_duplicate=False)]:
        if id(t) in first:
            tied[n] = first[id(t)]
        else:
            first[id(t)] = n
    if tied:
        graph.meta["tied"] = tied
    return graph


def capture_inference(model, example_inputs: Any, *, name: str | None = None) -> Graph:
    """Capture the forward pass of ``model`` (no backward, no update) as an autoplace Graph."""
    import torch

    model, example_inputs = resolve_model(model, example_inputs)
    inputs, kwargs = split_inputs(example_inputs)
    check_inputs(model, inputs, kwargs, ())
    params = {n: p.detach() for n, p in model.named_parameters()}
    buffers = {n: b.detach() for n, b in model.named_buffers()}
    scopes = Scopes(model)

    def forward(params, buffers, inputs, kwargs):
        import torch.fx.traceback as fxt

        with fxt.annotate({"phase": Phase.FORWARD}), torch.no_grad():
            return torch.func.functional_call(model, {**params, **buffers}, inputs, kwargs)

    try:
        gm = trace_fake(forward, (params, buffers, inputs, kwargs), f"{type(model).__name__} forward")
    finally:
        scopes.remove()
    return _with_tied(to_graph(gm, name or type(model).__name__, [], list(params), list(buffers), {}, training=False),
                      model)
