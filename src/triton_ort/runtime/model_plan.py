"""The model plan: what one model's load decides before any request, held in one frozen object.

Built once at load from config.pbtxt (ServedConfig), its checked options, the hooks module, and the ONNX
model's tensors, it holds no ORT session, no device and nothing that changes while serving, so every runner
of the model (one per instance today; one per worker thread for a scheduler that has several) reads the
same plan. Two of its inputs come from the loaded session, as facts, not as the session: the tensors
(ORT's view of the file: the same `OnnxSignature` that `triton-ort config` reads offline from the graph,
autocomplete.read_onnx_signature, which an ORT-format model could not give) and whether CUDA graphs are
on (graph_buckets.graphs_on: the session's provider options say).

It decides:
- whether the requests of one execute may share an ORT run (`gathers`: parameter gather_requests, or,
  where the outputs follow the batch axis, unless the graph mixes rows across it, row_mixing.py);
- up to which batch size CUDA graphs serve padded buckets (`graph_rows`, graph_buckets.padded_rows);
- the overridable inputs of one value per request, and how a request's are made what the model takes;
- what gathering calls: the runner itself, or (only with a hooks module, so a model without one pays
  nothing for it) the runner with its hooks around it (`batch_runner`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import InputError
from ..model.load_checks import check_tensors
from ..model.options import ModelOptions
from ..model.row_mixing import row_mixing_in_file
from ..model.served_config import ServedConfig
from ..model.signature import OnnxSignature, TensorSpec, one_value_per_request
from .gather import BatchRunner
from .graph_buckets import padded_rows
from .output_placement import OutputPlacement
from .run_plan import outputs_follow_batch
from .tensor_checks import served_outputs

if TYPE_CHECKING:
    import torch

    from ..hooks.module import ClientSpecs, Hooks
    from .runner import IOBindingRunner

LOGGER = logging.getLogger(__name__)


@dataclass(frozen=True)
class ModelPlan:
    """One model's load-time decisions (the module's docstring)."""

    config: ServedConfig
    options: ModelOptions
    onnx_path: Path
    signature: OnnxSignature
    """The model's tensors as ORT reads them."""
    hooks: Hooks | None
    client: ClientSpecs | None
    """config.pbtxt's tensors, where hooks stand between the client and the model."""
    output_placement: OutputPlacement
    """Where the client's outputs go (on a CUDA instance)."""
    shared_inputs: frozenset[str]
    """The model's overridable inputs without a batch axis: one value for all the rows of a run, never
    concatenated or padded (the runner's, gather.py, graph_buckets.py)."""
    one_value: Mapping[str, TensorSpec]
    """Of those, the ones a request sends, made what the model takes (Lane; none with hooks: the client
    sends config.pbtxt's tensors)."""
    output_names: tuple[str, ...]
    """The outputs an answer holds, in config.pbtxt's order."""
    runner_outputs_follow_batch: bool
    """Every ONNX output's first axis is the batch axis (run_plan.outputs_follow_batch)."""
    outputs_follow_batch: bool
    """The same for what gathering splits: the ONNX outputs, or with hooks config.pbtxt's (batched)."""
    gathers: bool
    cuda_graph: bool
    """Whether runs capture CUDA graphs (graph_buckets.graphs_on, asked before the plan is built)."""
    graph_rows: int
    """The batch size up to which CUDA graphs serve padded buckets; 0: no padding."""

    @property
    def max_batch_size(self) -> int:
        return self.config.max_batch_size

    @property
    def runner_output_placement(self) -> OutputPlacement:
        """Where the runner puts the session's outputs: with hooks they stay on the device for postprocess,
        and output_placement applies to what the hooks hand back (HookedRunner)."""
        return OutputPlacement("device") if self.hooks is not None else self.output_placement

    @property
    def request_specs(self) -> tuple[TensorSpec, ...]:
        """The tensors a request sends: config.pbtxt's with hooks, the model's otherwise."""
        return self.client.inputs if self.client is not None else self.signature.inputs

    @classmethod
    def build(
        cls,
        config: ServedConfig,
        options: ModelOptions,
        hooks: Hooks | None,
        onnx_path: Path,
        signature: OnnxSignature,
        graphs: bool,
    ) -> ModelPlan:
        """The plan, after the load's tensor checks (load_checks.check_tensors); `graphs`: whether the
        runner captures CUDA graphs."""
        inputs, outputs, overridable = signature
        check_tensors(config, inputs, outputs, hooks, overridable)
        client = None
        shared = [s for s in overridable if one_value_per_request(s)]
        one_value: dict[str, TensorSpec] = {}
        if hooks is None:
            one_value = {s.name: s for s in shared}
        else:
            from ..hooks.module import ClientSpecs

            client = ClientSpecs.from_config(config)
        # Requests can be concatenated along axis 0 only if every output's first axis is that same batch
        # axis; with hooks, config.pbtxt's outputs must have one.
        runner_follows_batch = outputs_follow_batch(inputs, outputs)
        batch_follows = config.batched if hooks is not None else runner_follows_batch
        gathers = _gathers(options, onnx_path, batch_follows)

        def rows_independent() -> bool:
            if options.gather_requests is None and batch_follows:
                return True  # _gathers has just checked the graph
            return _rows_independent(
                onnx_path,
                "batches are not padded to a CUDA graph's bucket (each batch size gets a graph of its own)",
                "no parameter pads them",
            )

        graph_rows = padded_rows(
            graphs, gathers, config.max_batch_size, runner_follows_batch, rows_independent
        )
        return cls(
            config=config,
            options=options,
            onnx_path=onnx_path,
            signature=signature,
            hooks=hooks,
            client=client,
            output_placement=OutputPlacement(options.output_placement, options.host_output_max_bytes),
            shared_inputs=frozenset(s.name for s in shared),
            one_value=one_value,
            output_names=tuple(entry.name for entry in config.outputs),
            runner_outputs_follow_batch=runner_follows_batch,
            outputs_follow_batch=batch_follows,
            gathers=gathers,
            cuda_graph=graphs,
            graph_rows=graph_rows,
        )

    def batch_runner(self, runner: IOBindingRunner) -> BatchRunner:
        """What gathering calls for this runner: the runner itself, or the runner with its hooks around it."""
        if self.hooks is None:
            return runner
        from .hooked_runner import HookedRunner

        assert self.client is not None
        return HookedRunner(
            runner,
            self.hooks,
            self.client,
            self.output_placement,
            self.outputs_follow_batch,
            self.options.gather_after_preprocess,
        )

    def served_outputs(self, outputs: Mapping[str, Any]) -> dict[str, Any]:
        """An answer's outputs as config.pbtxt serves them, in its order (the ONNX file may have more)."""
        return served_outputs(outputs, self.output_names)

    def one_value_inputs(
        self, tensors: Mapping[str, torch.Tensor]
    ) -> Mapping[str, torch.Tensor] | InputError:
        """A request's overridable inputs of one value per request as the model takes them, or the
        request's error. With max_batch_size > 0 Triton gives each a batch axis: its rows must hold that
        one value alike, and the model gets one row. A scalar default arrives as [1] (Triton refuses empty
        dims)."""
        given = self.one_value.keys() & tensors.keys()
        if not given:
            return tensors
        converted = dict(tensors)
        for name in given:
            tensor, spec = tensors[name], self.one_value[name]
            if self.config.max_batch_size > 0:
                if len(tensor.shape) == 0 or not bool((tensor == tensor[:1]).all()):
                    return InputError(
                        f"input {name!r} holds one value for the whole request (its ONNX shape is "
                        f"{list(spec.shape)}, with no batch axis): send the same value in each row of the "
                        "request's batch axis, or leave the input out for the model's default"
                    )
                tensor = tensor[0]
            if not spec.shape and tuple(tensor.shape) == (1,):
                tensor = tensor.reshape(())
            converted[name] = tensor
        return converted


def _gathers(options: ModelOptions, onnx_path: Path, outputs_follow_batch: bool) -> bool:
    """Whether the requests of one execute may share an ORT run: parameter gather_requests, or (auto)
    unless the graph mixes rows across the batch axis, which would make a request's answer depend on the
    requests beside it (row_mixing.py). Said once in the log when it runs them apart."""
    if options.gather_requests is not None:
        return options.gather_requests
    if not outputs_follow_batch:
        return True  # such a model's requests never share a run: nothing to check
    return _rows_independent(
        onnx_path,
        "requests run one per ORT run, not gathered",
        "parameter gather_requests: yes gathers them anyway",
    )


def _rows_independent(onnx_path: Path, consequence: str, override: str) -> bool:
    """Whether the graph never mixes rows across the batch axis (row_mixing.py). Where it does, or cannot
    be read, the log says so once, with the `consequence` and how to `override` it."""
    try:
        found = row_mixing_in_file(onnx_path)
    except Exception as error:  # a file ORT reads and the onnx package does not (an ORT-format model)
        LOGGER.warning(
            "%s: the graph could not be read to check whether it mixes rows across the batch axis (%s); %s",
            consequence,
            error,
            override,
        )
        return False
    if found is None:
        return True
    LOGGER.info(
        "%s: %s, so a request's answer would depend on the requests run beside it; %s",
        consequence,
        found.describe(),
        override,
    )
    return False
