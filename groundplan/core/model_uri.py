"""Models by MLflow URI: ``models:/<name>/<version|latest>``, ``runs:/...`` or a plain folder.

Shared by every learned component (SayCanPay's Can/Pay, the house env's point-goal policy), so each
resolves registry versions through the same client and caches downloads the same way; importing this
module loads nothing heavy (mlflow is imported on first use).
"""
from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

from groundplan.core.errors import MissingModelError


def resolve_model_folder(uri: str, tracking_uri: str | None, marker: str, what: str, cache: str) -> Path:
    """A local folder for ``uri``: a folder as is, or an MLflow URI (``models:/name/version``,
    ``runs:/id/path``, ...) downloaded once into ``<groundplan cache>/<cache>``. ``marker`` is the file
    that identifies a saved model of this kind (its folder is what is returned); ``what`` names the kind
    in error messages."""
    if os.path.isdir(uri):
        return Path(uri)
    if ":/" not in uri:
        raise MissingModelError(f"{what} '{uri}' is neither a folder nor an MLflow URI (models:/name/1)")
    from groundplan.core.paths import cache_dir

    identity = uri
    if uri.startswith("models:/"):
        # resolve through our own client: mlflow's models:/ repository would consult the global
        # default registry (a ./mlflow.db in the working directory), not ``tracking_uri``
        source, identity = model_version_source(uri, tracking_uri)
        if source.startswith("file://"):
            from urllib.parse import unquote, urlparse

            source = unquote(urlparse(source).path)
        if os.path.isdir(source):
            return Path(source)
        uri = source
    immutable = identity != uri or uri.startswith("runs:/")
    key = hashlib.sha256(f"{identity}|{tracking_uri}".encode()).hexdigest()[:16]
    target = cache_dir() / cache / key
    if immutable and (target / marker).exists():
        return target
    import mlflow.artifacts

    tmp = Path(str(target) + f".{os.getpid()}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        local = Path(mlflow.artifacts.download_artifacts(artifact_uri=uri, dst_path=str(tmp), tracking_uri=tracking_uri,
                                                         registry_uri=tracking_uri))
    except Exception as e:  # mlflow raises its own exception types
        raise MissingModelError(f"cannot load {what} '{uri}' from MLflow ({tracking_uri or 'default store'}): {e}") from e
    found = local if (local / marker).exists() else next((p.parent for p in local.rglob(marker)), None)
    if found is None:
        raise MissingModelError(f"'{uri}' holds no saved {what} ({marker} missing)")
    shutil.rmtree(target, ignore_errors=True)
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(str(found), str(target))
    shutil.rmtree(tmp, ignore_errors=True)
    return target


def model_version_source(uri: str, tracking_uri: str | None) -> tuple[str, str]:
    """``models:/name/version`` (or ``models:/name/latest``) → (the version's artifact source, an identity
    string of its run and source that keys the download cache)."""
    from mlflow.tracking import MlflowClient

    name, version = uri[len("models:/"):].rsplit("/", 1)
    client = MlflowClient(tracking_uri=tracking_uri, registry_uri=tracking_uri)
    try:
        if version == "latest":
            versions = client.search_model_versions(f"name='{name}'")
            if not versions:
                raise LookupError(f"no versions of '{name}'")
            mv = max(versions, key=lambda v: int(v.version))
        else:
            mv = client.get_model_version(name, version)
    except Exception as e:  # mlflow raises its own exception types
        raise MissingModelError(f"no registered model version '{uri}' in {tracking_uri or 'the default MLflow store'}: {e}") from e
    return mv.source, f"{name}/{mv.version}|{mv.run_id}|{mv.source}|{mv.creation_timestamp}"
