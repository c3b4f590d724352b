"""Experiment trackers next to TensorBoard: Weights & Biases and MLflow (all stages' run logs).

Optional (``pip install "nas-toolkit[wandb]"`` / ``"nas-toolkit[mlflow]"``) and off by default;
switched on in the config (``trackers.wandb.enabled=true``, ``trackers.mlflow.enabled=true``).
``MetricLogger`` (``nas.metrics``) hands every TensorBoard call to them as well, so they get
the same scalars under the same names and steps, the same figures and the text (genotypes,
DARTS-PT decisions), plus the resolved config at the start. Only rank 0 logs. A resumed run
(``resume=true``) continues the same tracker run: the ids are kept in ``trackers.json`` in the
run folder.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

IDS_FILE = "trackers.json"


def _flatten(tree: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(tree, Mapping):
        out: dict[str, Any] = {}
        for key, value in tree.items():
            out.update(_flatten(value, f"{prefix}{key}."))
        return out
    return {prefix[:-1]: tree}


def _missing(library: str, extra: str) -> ValueError:
    return ValueError(
        f"trackers.{extra}.enabled=true needs the {library} package; install it with "
        f'pip install "nas-toolkit[{extra}]" (or set trackers.{extra}.enabled=false)'
    )


class WandbTracker:
    """A Weights & Biases run (``mode``: online, offline — sync later with ``wandb sync`` — or
    disabled), its files under the run folder's ``wandb/``."""

    name = "wandb"

    def __init__(
        self, settings: Mapping[str, Any], run_dir: Path, run_name: str, config: dict[str, Any],
        run_id: str | None,
    ) -> None:  # fmt: skip
        try:
            import wandb
        except ImportError:
            raise _missing("wandb", "wandb") from None
        self._wandb = wandb
        mode = str(settings.get("mode") or "online")
        if mode not in ("online", "offline", "disabled"):
            raise ValueError(
                f"trackers.wandb.mode={mode!r}; expected online, offline (sync later with "
                "wandb sync) or disabled"
            )
        self.run = wandb.init(
            project=settings.get("project") or "nas-toolkit",
            entity=settings.get("entity"),
            group=settings.get("group"),
            tags=list(settings.get("tags") or []) or None,
            mode=mode,  # type: ignore[arg-type]
            name=run_name,
            dir=str(run_dir),
            config=config,
            id=run_id,
            resume="allow" if run_id else None,
        )
        self.run_id = str(self.run.id)

    def scalars(self, values: dict[str, float], step: int) -> None:
        self.run.log(values, step=step)

    def image(self, tag: str, image: np.ndarray, step: int) -> None:
        self.run.log({tag: self._wandb.Image(image)}, step=step)

    def text(self, tag: str, text: str, step: int) -> None:
        self.run.summary[tag] = text  # the latest value; every value is in metrics.jsonl

    def flush(self) -> None:
        pass

    def close(self) -> None:
        self.run.finish()


class MlflowTracker:
    """An MLflow run in ``experiment`` at ``tracking_uri`` (None: ``MLFLOW_TRACKING_URI`` or
    MLflow's default). Scalars go in batches; figures as images with their step; text and the
    config as artifacts; the config also as flattened parameters."""

    name = "mlflow"
    _BATCH = 500

    def __init__(
        self, settings: Mapping[str, Any], run_dir: Path, run_name: str, config: dict[str, Any],
        run_id: str | None,
    ) -> None:  # fmt: skip
        try:
            from mlflow.entities import Metric, Param
            from mlflow.tracking import MlflowClient
        except ImportError:
            raise _missing("mlflow", "mlflow") from None
        self._metric, self._param = Metric, Param
        self.client = MlflowClient(tracking_uri=settings.get("tracking_uri"))
        if run_id is None:
            name = str(settings.get("experiment") or "nas-toolkit")
            experiment = self.client.get_experiment_by_name(name)
            experiment_id = (
                experiment.experiment_id if experiment else self.client.create_experiment(name)
            )
            run = self.client.create_run(
                experiment_id, run_name=run_name, tags={"run_dir": str(run_dir.absolute())}
            )
            self.run_id = run.info.run_id
            params = [Param(key[:250], str(value)[:500]) for key, value in _flatten(config).items()]
            for i in range(0, len(params), 100):  # MLflow takes at most 100 per batch
                self.client.log_batch(self.run_id, params=params[i : i + 100])
            self.client.log_dict(self.run_id, config, "config.yaml")
        else:
            self.run_id = run_id
            self.client.update_run(run_id, status="RUNNING")
        self._pending: list[Any] = []

    def scalars(self, values: dict[str, float], step: int) -> None:
        now = int(time.time() * 1000)
        self._pending += [self._metric(k, float(v), now, step) for k, v in values.items()]
        if len(self._pending) >= self._BATCH:
            self.flush()

    def image(self, tag: str, image: np.ndarray, step: int) -> None:
        self.flush()
        self.client.log_image(self.run_id, image, key=tag, step=step)

    def text(self, tag: str, text: str, step: int) -> None:
        self.client.log_text(self.run_id, text, f"text/{tag}/step{step:08d}.txt")

    def flush(self) -> None:
        for i in range(0, len(self._pending), 1000):  # MLflow takes at most 1000 per batch
            self.client.log_batch(self.run_id, metrics=self._pending[i : i + 1000])
        self._pending = []

    def close(self) -> None:
        self.flush()
        self.client.set_terminated(self.run_id)


_KINDS: dict[str, type[WandbTracker] | type[MlflowTracker]] = {
    "wandb": WandbTracker,
    "mlflow": MlflowTracker,
}


def open_trackers(
    settings: Mapping[str, Any] | None, run_dir: Path, *, run_name: str, config: dict[str, Any],
    resume: bool,
) -> list[WandbTracker | MlflowTracker]:  # fmt: skip
    """The enabled trackers of ``settings`` (the config's ``trackers`` node); a resumed run
    reopens the tracker runs named in the run folder's ``trackers.json``."""
    if not settings:
        return []
    ids_path = run_dir / IDS_FILE
    ids: dict[str, str] = {}
    if resume and ids_path.is_file():
        ids = json.loads(ids_path.read_text())
    opened = []
    for kind, cls in _KINDS.items():
        node = settings.get(kind)
        if not node or not node.get("enabled", False):
            continue
        try:
            opened.append(cls(node, run_dir, run_name, config, ids.get(kind)))
        except ValueError:
            raise
        except Exception as e:  # not logged in, server unreachable, ...: one line, not a trace
            first = str(e).strip().splitlines()[0] if str(e).strip() else ""
            for tracker in opened:
                tracker.close()
            raise ValueError(
                f"trackers.{kind}: could not start a run ({type(e).__name__}: {first}); "
                f"expected a working {kind} set-up, or trackers.{kind}.enabled=false"
            ) from None
    if opened:
        ids_path.write_text(json.dumps({t.name: t.run_id for t in opened}, indent=2) + "\n")
    return opened


class TrackedWriter:
    """TensorBoard's ``SummaryWriter`` whose scalars, images and text also go to the trackers;
    every other method is the writer's own."""

    def __init__(self, writer: Any, trackers: list[Any]) -> None:
        self._writer = writer
        self._trackers = trackers

    def __getattr__(self, name: str) -> Any:
        return getattr(self._writer, name)

    def add_scalar(self, tag: str, value: Any, step: int | None = None, **kwargs: Any) -> None:
        self._writer.add_scalar(tag, value, step, **kwargs)
        for tracker in self._trackers:
            tracker.scalars({tag: float(value)}, int(step or 0))

    def add_image(
        self, tag: str, image: Any, step: int | None = None, dataformats: str = "CHW", **kwargs: Any
    ) -> None:
        self._writer.add_image(tag, image, step, dataformats=dataformats, **kwargs)
        if self._trackers:
            array = np.asarray(image)
            if dataformats == "CHW":
                array = array.transpose(1, 2, 0)
            if array.dtype != np.uint8:  # floats in [0, 1], as TensorBoard takes them
                array = (np.clip(array, 0.0, 1.0) * 255).round().astype(np.uint8)
            for tracker in self._trackers:
                tracker.image(tag, array, int(step or 0))

    def add_text(self, tag: str, text: str, step: int | None = None, **kwargs: Any) -> None:
        self._writer.add_text(tag, text, step, **kwargs)
        for tracker in self._trackers:
            tracker.text(tag, text, int(step or 0))

    def flush(self) -> None:
        self._writer.flush()
        for tracker in self._trackers:
            tracker.flush()

    def close(self) -> None:
        self._writer.close()
        for tracker in self._trackers:
            tracker.close()
