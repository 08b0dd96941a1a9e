"""Render a kustomization (deploy/kubernetes) without kustomize, for offline validation in CI.

CI installs from PyPI only, where no kustomize build exists; this implements the subset of kustomize the
project's manifests use and refuses every other field, so a manifest change that needs more fails here
instead of being validated wrongly. Users deploy with `kubectl apply -k`; tests/deploy compares this
renderer with `kubectl kustomize` wherever kubectl is installed.

    python scripts/render_manifests.py deploy/kubernetes/overlays/gpu > rendered.yaml
"""

from __future__ import annotations

import argparse
import copy
import sys
from pathlib import Path
from typing import Any

import jsonpatch
import yaml

Manifest = dict[str, Any]

SUPPORTED_FIELDS = frozenset({"apiVersion", "kind", "resources", "namespace", "images", "patches"})
# Kinds without a namespace among those a kustomization here may hold.
CLUSTER_SCOPED_KINDS = frozenset({"Namespace", "ClusterRole", "ClusterRoleBinding", "PersistentVolume"})


class RenderError(ValueError):
    """The kustomization uses something this renderer does not implement, or is malformed."""


def render(directory: Path) -> list[Manifest]:
    """The manifests of the kustomization in `directory`, with its bases, namespace, images and patches."""
    kustomization_file = directory / "kustomization.yaml"
    if not kustomization_file.is_file():
        raise RenderError(f"{directory}: no kustomization.yaml (expected a kustomize base or overlay)")
    kustomization = yaml.safe_load(kustomization_file.read_text())
    unsupported = sorted(set(kustomization) - SUPPORTED_FIELDS)
    if unsupported:
        raise RenderError(
            f"{kustomization_file}: unsupported field(s) {unsupported}; this renderer implements "
            f"{sorted(SUPPORTED_FIELDS)} (extend scripts/render_manifests.py, or use those)"
        )
    manifests: list[Manifest] = []
    for entry in kustomization.get("resources", []):
        path = directory / entry
        if path.is_dir():
            manifests.extend(render(path))
        else:
            manifests.extend(doc for doc in yaml.safe_load_all(path.read_text()) if doc is not None)
    for patch in kustomization.get("patches", []):
        manifests = [_apply_patch(manifest, patch, kustomization_file) for manifest in manifests]
    for image in kustomization.get("images", []):
        for manifest in manifests:
            _set_image(manifest, image)
    namespace = kustomization.get("namespace")
    if namespace is not None:
        for manifest in manifests:
            if manifest["kind"] not in CLUSTER_SCOPED_KINDS:
                manifest.setdefault("metadata", {})["namespace"] = namespace
    return manifests


def _apply_patch(manifest: Manifest, patch: dict[str, Any], source: Path) -> Manifest:
    target = patch.get("target")
    if not isinstance(target, dict) or not isinstance(patch.get("patch"), str):
        raise RenderError(
            f"{source}: each patch needs `target` and an inline JSON 6902 `patch` (got {patch})"
        )
    if set(target) != {"kind", "name"}:
        raise RenderError(f"{source}: a patch target names exactly `kind` and `name` (got {target})")
    if (manifest["kind"], manifest["metadata"]["name"]) != (target["kind"], target["name"]):
        return manifest
    operations = yaml.safe_load(patch["patch"])
    if not isinstance(operations, list):
        raise RenderError(f"{source}: patch for {target} is not a JSON 6902 list of operations")
    patched: Manifest = jsonpatch.apply_patch(copy.deepcopy(manifest), operations)
    return patched


def _set_image(manifest: Manifest, image: dict[str, str]) -> None:
    pod_spec = manifest.get("spec", {}).get("template", {}).get("spec", {})
    for container in pod_spec.get("containers", []) + pod_spec.get("initContainers", []):
        name, _, tag = container["image"].partition(":")
        if name != image["name"]:
            continue
        container["image"] = f"{image.get('newName', name)}:{image.get('newTag', tag)}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("directory", type=Path, help="a kustomize base or overlay folder")
    args = parser.parse_args(argv)
    try:
        manifests = render(args.directory)
    except RenderError as error:
        print(f"render_manifests: {error}", file=sys.stderr)
        return 2
    yaml.safe_dump_all(manifests, sys.stdout, sort_keys=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
