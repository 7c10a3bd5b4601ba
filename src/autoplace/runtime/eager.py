"""The runtime of a placement on one device: the step runs in the caller's process as plain PyTorch.

A placement that puts every op on one device needs no workers, no transfers and no per-op interpreter:
the best program for it is the user's own — the module's forward, autograd's backward and the optimizer's
own ``step`` (its foreach or fused kernels where the user asked for them). :class:`EagerRunner` runs
exactly that on a private copy of the module and optimizer, so a one-device placed step trains
bit for bit as eager PyTorch does, at eager's speed; the captured graph still describes it (what the
simulator judged), and its state is read back by the graph's names (``"fc.weight"``,
``"fc.weight.exp_avg"``), as the worker runtimes' is.

With ``micro_batches=M`` a step is eager gradient accumulation: the batch cut into ``M`` equal slices along
``batch_dim``, ``(loss_m / M).backward()`` for each, one optimizer step; the returned loss is the slices'
mean, as the captured step computes it.
"""

from __future__ import annotations

import copy
from typing import Any

from autoplace.capture.inputs import micro_batch
from autoplace.runtime.program import ExecutionError, torch_device

__all__ = ["EagerRunner"]


def _to(x: Any, device):
    """Every tensor of ``x`` on ``device`` (asynchronously only onto a GPU: a copy to the CPU is read at once)."""
    from torch.utils._pytree import tree_map

    fast = device.type == "cuda"
    return tree_map(lambda t: t.to(device, non_blocking=fast) if hasattr(t, "to") and hasattr(t, "shape") else t, x)


def _leaves(x: Any) -> list:
    """The tensors of a nested batch, in order."""
    import torch
    from torch.utils._pytree import tree_leaves

    return [t for t in tree_leaves(x) if isinstance(t, torch.Tensor)]


class EagerRunner:
    """A private copy of ``model`` and ``optimizer`` on ``device`` (a cluster device name: ``cpu:0``,
    ``cuda:1``), stepped as eager PyTorch (see the module docstring)."""

    def __init__(self, model, loss_fn, optimizer, device: str, *, micro_batches: int = 1, batch_dim: int = 0):
        import torch

        self.device = torch.device(torch_device(device))
        if self.device.type == "cuda" and (not torch.cuda.is_available()
                                           or (self.device.index or 0) >= torch.cuda.device_count()):
            raise ExecutionError(f"device {device!r} cannot run here: this machine has "
                                 f"{torch.cuda.device_count() if torch.cuda.is_available() else 'no'} CUDA devices")
        # one deepcopy of both, so the copied optimizer's param groups hold the copied module's parameters
        try:
            self.model, self.optimizer = copy.deepcopy((model, optimizer))
        except Exception as e:  # noqa: BLE001 - a module holding a lock, a file, a process handle ...
            raise ExecutionError(f"the model and optimizer cannot be copied to run the step in this process "
                                 f"({type(e).__name__}: {' '.join(str(e).split())[:120]}): compile with "
                                 "runtime='shm' to run it on a worker process") from None
        self.model.to(self.device)                  # in place: the optimizer's parameters move with it
        # its state to where torch.optim keeps it for these parameters (a step count stays on the CPU unless
        # the optimizer is fused or capturable)
        self.optimizer.load_state_dict(self.optimizer.state_dict())
        self.model.train()
        self.loss_fn, self.micro_batches, self.batch_dim = loss_fn, micro_batches, batch_dim
        self._params = dict(self.model.named_parameters())
        self._buffers = dict(self.model.named_buffers())
        self._runs: dict[tuple, int] = {}           # batch shapes -> the micro-batch count that ran

    def step(self, inputs: Any, targets: tuple, groups: list[dict]) -> Any:
        """One training step on ``inputs`` (``(args, kwargs)``) and ``targets`` (a tuple); ``groups`` are the
        user's optimizer's param groups now (their numbers — a scheduler's learning rate — are copied in
        first). Returns the loss, a detached CPU tensor."""
        for mine, theirs in zip(self.optimizer.param_groups, groups):
            for k, v in theirs.items():
                if k != "params" and isinstance(v, (int, float, bool, tuple)) and mine.get(k) != v:
                    mine[k] = v
        args, kwargs = _to(inputs, self.device)
        targets = _to(targets, self.device)
        shape = tuple(tuple(t.shape) for t in _leaves((args, kwargs, targets)))
        # the count this batch shape ran with before, else the counts it may take
        counts = [self._runs[shape]] if shape in self._runs else self._counts(args, kwargs, targets)
        for m in counts:
            self.optimizer.zero_grad(set_to_none=True)
            done = [0]
            saved = self._state() if m != counts[-1] else None
            try:
                loss = self._accumulate(args, kwargs, targets, m, done)
                break
            except (ValueError, RuntimeError):
                # a micro-batch too small to run (a BatchNorm of one row): fewer, as the captured step of
                # this batch shape falls back — where the first one failed, with the buffers and generator
                # as they were (a BatchNorm counts the batch before it checks its size)
                if done[0] or saved is None:
                    raise
                self._restore(saved)
        self._runs[shape] = m
        self.optimizer.step()
        return loss.detach().cpu()

    def _state(self) -> tuple:
        """The buffers and the generators a failed attempt may have changed."""
        import torch

        cuda = torch.cuda.get_rng_state(self.device) if self.device.type == "cuda" else None
        return {n: b.clone() for n, b in self._buffers.items()}, torch.random.get_rng_state(), cuda

    def _restore(self, saved: tuple) -> None:
        import torch

        buffers, cpu, cuda = saved
        with torch.no_grad():
            for n, b in self._buffers.items():
                b.copy_(buffers[n])
        torch.random.set_rng_state(cpu)
        if cuda is not None:
            torch.cuda.set_rng_state(cuda, self.device)

    def _accumulate(self, args, kwargs, targets, m: int, done: list[int]):
        """Forward and backward of ``m`` micro-batches (gradients of ``loss_j / m`` summed); their mean loss.
        ``done[0]`` counts the micro-batches that ran."""
        import torch

        if m == 1:
            loss = self.loss_fn(self.model(*args, **kwargs), *targets)
            loss.backward()
            return loss

        losses = []
        for j in range(m):
            a, kw, t = micro_batch((args, kwargs, targets), j, m, self.batch_dim)
            loss_j = self.loss_fn(self.model(*a, **kw), *t)
            (loss_j * (1.0 / m)).backward()
            losses.append(loss_j.detach())
            done[0] += 1
        return torch.stack(losses).mean()

    def _counts(self, args, kwargs, targets) -> list[int]:
        """The micro-batch counts this batch may be cut into, most first: those up to ``micro_batches`` that
        divide it and its size along ``batch_dim`` (what the captured step of another batch shape tries: the
        smaller last batch of an epoch)."""
        m = self.micro_batches
        sizes = {t.shape[self.batch_dim] for t in _leaves((args, kwargs, targets)) if t.dim() > self.batch_dim}
        if m == 1 or len(sizes) != 1:
            return [m]
        size = sizes.pop()
        return [d for d in range(m, 0, -1) if m % d == 0 and size % d == 0]

    def values(self, names: list[str], initial: dict[str, Any] | None = None) -> dict[str, Any]:
        """CPU copies of the named parameters, buffers and optimizer state (``"<parameter>.<key>"``); state
        torch.optim has not made (a parameter that got no gradient yet) is ``initial``'s."""
        import torch

        out = {}
        for n in names:
            if n in self._params:
                v = self._params[n]
            elif n in self._buffers:
                v = self._buffers[n]
            else:
                param, _, key = n.rpartition(".")
                state = self.optimizer.state.get(self._params.get(param), {}) if param in self._params else {}
                if key not in state:
                    if initial is not None and n in initial:
                        out[n] = initial[n].clone()
                        continue
                    raise ExecutionError(f"no parameter, buffer or optimizer state named {n!r} in the step")
                v = state[key]
                if not isinstance(v, torch.Tensor):
                    v = torch.tensor(v)
            out[n] = v.detach().to("cpu", copy=True)
        return out

    def close(self) -> None:
        """Drop the copies (their memory goes back to the device)."""
        self.model = self.optimizer = None
        self._params, self._buffers = {}, {}

