"""Render a kustomization (deploy/kubernetes) without kustomize, for offline validation in CI.

CI installs from PyPI only, where no kustomize build exists; this implements the subset of kustomize the
project's manifests use and refuses every other field, so a manifest change that needs more fails here
instead of being validated wrongly. Users deploy with `kubectl apply -k`; tests/deploy compares this
renderer with `kubectl kustomize` wherever kubectl is installed.

    python scripts/render_manifests.py deploy/kubernetes/overlays/gpu > rendered.yaml

The subset, in kustomize's order: `resources` (files and other kustomizations), then `components` (each a
`kind: Component` folder whose resources are added and whose patches apply to everything gathered so far),
then the kustomization's own `patches` (inline JSON 6902 with a `target` of `kind` and `name`), `images`
(`newName`, `newTag`, `digest`) and `namespace`.
"""

from __future__ import annotations

import argparse
import copy
import re
import sys
from pathlib import Path
from typing import Any

import jsonpatch
import yaml

Manifest = dict[str, Any]

KUSTOMIZATION = ("kustomize.config.k8s.io/v1beta1", "Kustomization")
COMPONENT = ("kustomize.config.k8s.io/v1alpha1", "Component")
SUPPORTED_FIELDS = {
    KUSTOMIZATION: frozenset(
        {"apiVersion", "kind", "resources", "components", "namespace", "images", "patches"}
    ),
    # A component here adds objects and patches them; a namespace or image change belongs to the overlay.
    COMPONENT: frozenset({"apiVersion", "kind", "resources", "patches"}),
}
IMAGE_FIELDS = frozenset({"name", "newName", "newTag", "digest"})
# Kinds without a namespace among those a kustomization here may hold.
CLUSTER_SCOPED_KINDS = frozenset({"Namespace", "ClusterRole", "ClusterRoleBinding", "PersistentVolume"})


class RenderError(ValueError):
    """The kustomization uses something this renderer does not implement, or is malformed."""


def render(directory: Path) -> list[Manifest]:
    """The manifests of the kustomization in `directory`, with its bases, components, namespace, images
    and patches."""
    return _render(directory, KUSTOMIZATION, [])


def _load(directory: Path, expected: tuple[str, str]) -> tuple[Path, dict[str, Any]]:
    kustomization_file = directory / "kustomization.yaml"
    if not kustomization_file.is_file():
        raise RenderError(f"{directory}: no kustomization.yaml (expected a kustomize base or overlay)")
    kustomization = yaml.safe_load(kustomization_file.read_text())
    if not isinstance(kustomization, dict):
        raise RenderError(f"{kustomization_file}: not a mapping")
    # kustomize reads a file without apiVersion/kind as a Kustomization.
    found = (
        kustomization.get("apiVersion", KUSTOMIZATION[0]),
        kustomization.get("kind", KUSTOMIZATION[1]),
    )
    if found != expected:
        raise RenderError(
            f"{kustomization_file}: is a {found[1]} ({found[0]}) where a {expected[1]} ({expected[0]}) "
            "is expected (`resources` lists kustomizations, `components` lists components)"
        )
    unsupported = sorted(set(kustomization) - SUPPORTED_FIELDS[expected])
    if unsupported:
        raise RenderError(
            f"{kustomization_file}: unsupported field(s) {unsupported}; this renderer implements "
            f"{sorted(SUPPORTED_FIELDS[expected])} in a {expected[1]} (extend "
            "scripts/render_manifests.py, or use those)"
        )
    return kustomization_file, kustomization


def _render(directory: Path, expected: tuple[str, str], manifests: list[Manifest]) -> list[Manifest]:
    """`manifests` (what a parent gathered before this component; empty for a kustomization) with this
    folder's resources added and its transformations applied."""
    kustomization_file, kustomization = _load(directory, expected)
    manifests = list(manifests)
    for entry in kustomization.get("resources", []):
        path = directory / entry
        if path.is_dir():
            manifests.extend(_render(path, KUSTOMIZATION, []))
        else:
            manifests.extend(doc for doc in yaml.safe_load_all(path.read_text()) if doc is not None)
    for entry in kustomization.get("components", []):
        manifests = _render(directory / entry, COMPONENT, manifests)
    for patch in kustomization.get("patches", []):
        manifests = _apply_patch(manifests, patch, kustomization_file)
    for image in kustomization.get("images", []):
        unknown = sorted(set(image) - IMAGE_FIELDS)
        if unknown or "name" not in image:
            raise RenderError(
                f"{kustomization_file}: an image names `name` and some of {sorted(IMAGE_FIELDS)} "
                f"(got {image})"
            )
        for manifest in manifests:
            _set_image(manifest, image)
    namespace = kustomization.get("namespace")
    if namespace is not None:
        for manifest in manifests:
            if manifest["kind"] not in CLUSTER_SCOPED_KINDS:
                manifest.setdefault("metadata", {})["namespace"] = namespace
    return manifests


def _apply_patch(manifests: list[Manifest], patch: dict[str, Any], source: Path) -> list[Manifest]:
    target = patch.get("target")
    if not isinstance(target, dict) or not isinstance(patch.get("patch"), str):
        raise RenderError(
            f"{source}: each patch needs `target` and an inline JSON 6902 `patch` (got {patch})"
        )
    if set(target) != {"kind", "name"}:
        raise RenderError(f"{source}: a patch target names exactly `kind` and `name` (got {target})")
    operations = yaml.safe_load(patch["patch"])
    if not isinstance(operations, list):
        raise RenderError(f"{source}: patch for {target} is not a JSON 6902 list of operations")
    matched = False
    patched: list[Manifest] = []
    for manifest in manifests:
        if (manifest["kind"], manifest["metadata"]["name"]) == (target["kind"], target["name"]):
            matched = True
            manifest = jsonpatch.apply_patch(copy.deepcopy(manifest), operations)
        patched.append(manifest)
    if not matched:
        # kustomize accepts a patch that matches nothing; here it is a mistake (a renamed object).
        raise RenderError(f"{source}: the patch target {target} matches no object")
    return patched


def _split_image(image: str) -> tuple[str, str | None, str | None]:
    """`registry:5000/name:tag@sha256:...` as (name, tag, digest); a port is not a tag."""
    name, _, digest = image.partition("@")
    tag = None
    match = re.fullmatch(r"(.+?):([\w][\w.-]*)", name)
    if match and "/" not in match.group(2):
        name, tag = match.groups()
    return name, tag, digest or None


def _set_image(manifest: Manifest, image: dict[str, str]) -> None:
    if manifest["kind"] == "Pod":
        pod_spec = manifest.get("spec", {})
    else:
        pod_spec = manifest.get("spec", {}).get("template", {}).get("spec", {})
    for container in pod_spec.get("containers", []) + pod_spec.get("initContainers", []):
        name, tag, digest = _split_image(container["image"])
        if name != image["name"]:
            continue
        reference = image.get("newName", name)
        if "digest" in image:
            # kustomize drops the tag when a digest is given
            container["image"] = f"{reference}@{image['digest']}"
        elif "newTag" in image:
            container["image"] = f"{reference}:{image['newTag']}"
        else:
            suffix = f":{tag}" if tag else ""
            container["image"] = f"{reference}{suffix}" + (f"@{digest}" if digest else "")


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
