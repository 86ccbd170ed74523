"""Where a training run's trajectories come from: a folder, or the collection that MLflow recorded.

``groundplan collect`` logs its dataset to MLflow as a run input (:func:`collected_dataset`: name, digest,
and the Parquet folder as its source). A training config's ``data`` entry may name that collection instead
of its folder, so the model's run can say which collection it read:

- a path, folder or glob: read as is (no MLflow lineage);
- ``runs:/<run id>``: the collect run; the folder is its logged dataset's source;
- ``datasets:/<name>`` or ``datasets:/<name>@<digest>``: the newest collect run that logged the dataset
  ``name`` (the collect config's ``name``), of that digest when one is given.

:func:`resolve_data` turns every entry into a :class:`DataSource` once, before anything is read or trained,
in the tracking store the training logs to (collect and train must share one store for the lineage to
point anywhere). A logged dataset's digest is recomputed from the folder: a folder collected into again
since (or edited) is refused rather than trained on under the old digest's name.

mlflow is imported on first use, so importing this module stays light.
"""
from __future__ import annotations

import json
import os
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable
from urllib.parse import unquote, urlparse

from groundplan.core.errors import InvalidInputError

#: the input context collect logs its dataset under (MLflow's ``mlflow.data.context`` tag)
COLLECT_CONTEXT = "collect"
#: the input context a training run logs the dataset it read under
TRAINING_CONTEXT = "training"
#: the trajectory columns the logged dataset (and so its digest) covers: who, what and whether it worked,
#: not the long per-step lists, so logging stays cheap for VirtualHome's admissible-action lists
DATASET_COLUMNS: tuple[str, ...] = ("traj_id", "env", "split", "task_id", "goal", "success", "source")
MLFLOW_SCHEMES: tuple[str, ...] = ("runs:/", "datasets:/")
#: what every error here ends with: the one way the stores line up
STORE_HINT = ("collect and train must log to the same MLflow store: set MLFLOW_TRACKING_URI for both commands, "
              "or the train config's tracking_uri to the store collect logged to (by default "
              "sqlite:///<collect output_dir>/mlruns/mlflow.db)")


def collected_dataset(table: Any, source: str | Path, name: str) -> Any:
    """The MLflow dataset of trajectory ``table`` (pyarrow, the collect schema) stored in folder ``source``:
    :data:`DATASET_COLUMNS` as a pandas dataset named ``name``. Collect logs it and training recomputes
    it, so both sides' digests come from this one definition."""
    import mlflow.data

    frame = table.select(list(DATASET_COLUMNS)).to_pandas()
    with warnings.catch_warnings():  # a local path matches two equivalent MLflow source types; both are right
        warnings.simplefilter("ignore", UserWarning)
        return mlflow.data.from_pandas(frame, source=str(Path(source).resolve()), name=name)


@dataclass(frozen=True)
class DataSource:
    """One ``data`` entry of a training config, resolved: the paths to read and, for a collection named
    through MLflow, the collect run and the dataset it logged (an ``mlflow.entities.Dataset``; None when
    the run predates dataset inputs and only its ``data_dir`` param names the folder)."""

    given: str
    paths: tuple[str, ...]
    run_id: str | None = None
    dataset: Any = None

    @property
    def label(self) -> str | None:
        """``name@digest`` of the logged dataset, or None."""
        return f"{self.dataset.name}@{self.dataset.digest}" if self.dataset is not None else None


def is_mlflow_source(entry: str) -> bool:
    return entry.startswith(MLFLOW_SCHEMES)


def resolve_data(entries: Iterable[str], tracking_uri: str | None) -> list[DataSource]:
    """Every ``data`` entry as a :class:`DataSource` (see the module docstring). Paths pass unchecked here
    (the reader names a missing one); an MLflow reference needs ``tracking_uri``, an existing store, a
    collect run in it that logged a dataset, and that dataset's folder, unchanged."""
    entries = list(entries)
    out: list[DataSource] = []
    client = None
    for entry in entries:
        if not is_mlflow_source(entry):
            out.append(DataSource(entry, (entry,)))
            continue
        if client is None:
            client = _client(entry, tracking_uri)
        if entry.startswith("runs:/"):
            run_id = entry[len("runs:/"):].strip("/")
            if not run_id or "/" in run_id:
                raise InvalidInputError(f"data {entry!r}: give the collect run as runs:/<run id>, without an "
                                        "artifact path (collect prints the id as 'MLflow run: ...')")
            out.append(_from_run(entry, _get_run(client, entry, run_id, tracking_uri)))
        else:
            out.append(_from_run(entry, _find_dataset_run(client, entry, tracking_uri)))
    return out


def lineage_tags(sources: Iterable[DataSource]) -> dict[str, str]:
    """The tags that record on a training run (and its registered model version) which collection it read:
    ``groundplan.data.collect_run`` (run ids), ``groundplan.data.dataset`` (``name@digest``) and
    ``groundplan.data.source`` (the folders read), each comma-separated over the config's entries."""
    sources = list(sources)
    tags = {"groundplan.data.collect_run": ", ".join(s.run_id for s in sources if s.run_id),
            "groundplan.data.dataset": ", ".join(s.label for s in sources if s.label),
            "groundplan.data.source": ", ".join(p for s in sources for p in s.paths)}
    return {k: v for k, v in tags.items() if v}


# ------------------------------------------------------------------------------------ lookups
def _client(entry: str, tracking_uri: str | None) -> Any:
    """A client of ``tracking_uri``, after checking that a local store exists: MLflow would otherwise
    create an empty one and report every run as missing."""
    if not tracking_uri:
        raise InvalidInputError(f"data {entry!r} names an MLflow run but no tracking store is set; {STORE_HINT}")
    local = _local_store_path(tracking_uri)
    if local is not None and not local.exists():
        raise InvalidInputError(f"data {entry!r}: no MLflow tracking store at {tracking_uri} (nothing was logged "
                                f"there yet); {STORE_HINT}")
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=tracking_uri)


def _local_store_path(uri: str) -> Path | None:
    """The file or folder of a local store (SQLite, file store), None for a server or database URI."""
    if uri.startswith("sqlite:///"):
        return Path(uri[len("sqlite:///"):])
    if uri.startswith("file:"):
        return Path(unquote(urlparse(uri).path))
    if "://" not in uri:
        return Path(uri)
    return None


def _get_run(client: Any, entry: str, run_id: str, tracking_uri: str) -> Any:
    try:
        return client.get_run(run_id)
    except Exception as e:  # mlflow raises its own exception types
        if getattr(e, "error_code", None) == "RESOURCE_DOES_NOT_EXIST" or "not found" in str(e).lower():
            raise InvalidInputError(f"data {entry!r}: no run {run_id} in {tracking_uri}; {STORE_HINT}") from None
        raise InvalidInputError(f"data {entry!r}: cannot read run {run_id} from {tracking_uri}: {e}") from None


def _find_dataset_run(client: Any, entry: str, tracking_uri: str) -> Any:
    """The newest collect run in the store whose input is the dataset ``datasets:/<name>[@<digest>]``."""
    ref = entry[len("datasets:/"):]
    name, _, digest = ref.partition("@")
    if not name or "'" in name or "'" in digest:
        raise InvalidInputError(f"data {entry!r}: give a dataset as datasets:/<name> or datasets:/<name>@<digest> "
                                "(the collect config's name; MLflow shows the digest beside it)")
    query = f"dataset.name = '{name}' AND dataset.context = '{COLLECT_CONTEXT}'"
    if digest:
        query += f" AND dataset.digest = '{digest}'"
    try:
        experiments = [e.experiment_id for e in client.search_experiments()]
        runs = client.search_runs(experiments, query, order_by=["attributes.start_time DESC"], max_results=1)
    except Exception as e:  # mlflow raises its own exception types
        raise InvalidInputError(f"data {entry!r}: cannot search {tracking_uri}: {e}") from None
    if not runs:
        what = f"dataset {name!r}" + (f" of digest {digest}" if digest else "")
        raise InvalidInputError(f"data {entry!r}: no collect run in {tracking_uri} logged the {what}; {STORE_HINT}")
    return runs[0]


def _from_run(entry: str, run: Any) -> DataSource:
    """The folder a collect run logged, checked against its dataset's digest."""
    from groundplan.datasets.store import load_trajectories

    run_id = run.info.run_id
    logged = [i.dataset for i in run.inputs.dataset_inputs
              if any(t.key == "mlflow.data.context" and t.value == COLLECT_CONTEXT for t in i.tags)]
    if not logged:
        folder = run.data.params.get("data_dir")  # a collect run whose dataset input failed to log
        if folder is None:
            raise InvalidInputError(f"data {entry!r}: run {run_id} logged no collected dataset (no input of "
                                    f"context '{COLLECT_CONTEXT}'): give the run id groundplan collect printed "
                                    "('MLflow run: ...')")
        _check_folder(entry, run_id, folder)
        return DataSource(entry, (folder,), run_id=run_id)
    paths = []
    for dataset in logged:
        folder = _dataset_folder(entry, run_id, dataset)
        _check_folder(entry, run_id, folder)
        now = collected_dataset(load_trajectories(folder, columns=DATASET_COLUMNS), folder, dataset.name).digest
        if now != dataset.digest:
            raise InvalidInputError(
                f"data {entry!r}: {folder} changed since run {run_id} logged it as dataset {dataset.name!r} "
                f"(digest {dataset.digest}, now {now}): it was collected into again or edited. Train from the run "
                f"that logged it as it is now (datasets:/{dataset.name}@{now}, or the newest: "
                f"datasets:/{dataset.name}), or from the folder itself")
        paths.append(folder)
    # collect logs one dataset per run; several (logged by hand) are all read, the first is recorded
    return DataSource(entry, tuple(paths), run_id=run_id, dataset=logged[0])


def _dataset_folder(entry: str, run_id: str, dataset: Any) -> str:
    """The local folder in a dataset's source (``{"uri": ...}`` of MLflow's local and file sources)."""
    try:
        uri = json.loads(dataset.source).get("uri") or ""
    except (ValueError, AttributeError):
        uri = ""
    if uri.startswith("file:"):
        uri = unquote(urlparse(uri).path)
    if not uri or "://" in uri:
        raise InvalidInputError(f"data {entry!r}: the dataset {dataset.name!r} of run {run_id} is not a local "
                                f"folder (source {dataset.source_type}: {dataset.source})")
    return uri


def _check_folder(entry: str, run_id: str, folder: str) -> None:
    if not os.path.isdir(folder):
        raise InvalidInputError(f"data {entry!r}: run {run_id} collected into {folder}, which is not a folder on "
                                "this machine (moved, deleted, or collected elsewhere)")
