#!/usr/bin/env bash
# Installs what the real-VS-Code tests (tests/editors/test_vscode_real.py) drive, once per
# machine, cached: code-server 4.100.3 (VS Code 1.100.3) from npm, Debian's chromium and rg,
# and Playwright for Python in the project's .venv (its driver only: browsers are never
# downloaded, the tests launch Debian's chromium through `executable_path`).
#   editors/vscode/test-real/setup.sh        prints the code-server binary's path on its last line
# Environment: LLADA_EDITOR_CACHE (default ~/.cache/llada-lsp/editors), PYTHON (the .venv's).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../../.." && pwd)
CODE_SERVER_VERSION=4.100.3
PLAYWRIGHT_VERSION=1.52.0
CACHE=${LLADA_EDITOR_CACHE:-$HOME/.cache/llada-lsp/editors}
PREFIX=$CACHE/code-server-$CODE_SERVER_VERSION
PY=${PYTHON:-$ROOT/.venv/bin/python}
log() { echo "== $*" >&2; }

# Debian packages: the browser, ripgrep (code-server's own download needs GitHub), and the
# kerberos headers its native module builds against.
missing=()
command -v chromium >/dev/null || missing+=(chromium)
command -v rg >/dev/null || missing+=(ripgrep)
dpkg -s libkrb5-dev >/dev/null 2>&1 || missing+=(libkrb5-dev)
if [ ${#missing[@]} -gt 0 ]; then
  command -v apt-get >/dev/null || { echo "needs ${missing[*]} (no apt-get here)" >&2; exit 1; }
  SUDO=; [ "$(id -u)" = 0 ] || SUDO=sudo
  log "apt-get install ${missing[*]}"
  $SUDO apt-get update -q >&2 || true
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}" >&2
fi

if ! "$PY" -c "import playwright, sys; from importlib.metadata import version; sys.exit(version('playwright') != '$PLAYWRIGHT_VERSION')" 2>/dev/null; then
  log "pip install playwright==$PLAYWRIGHT_VERSION (driver only, no browsers)"
  "$PY" -m pip install -q "playwright==$PLAYWRIGHT_VERSION" >&2
fi

if [ ! -f "$PREFIX/.ready" ]; then
  log "npm install code-server@$CODE_SERVER_VERSION into $PREFIX (a few minutes, once)"
  t0=$(date +%s)
  rm -rf "$PREFIX"
  mkdir -p "$PREFIX"
  # code-server's VS Code depends on @vscode/ripgrep 1.15.11, whose postinstall first looks for
  # its release archive (ripgrep v13.0.0-10) in $TMPDIR/vscode-ripgrep-cache-1.15.11 and only
  # then downloads it from GitHub: put Debian's rg there, packed as the archive it expects.
  case "$(uname -m)" in
    x86_64) RG_TARGET=x86_64-unknown-linux-musl ;;
    aarch64) RG_TARGET=aarch64-unknown-linux-musl ;;
    *) echo "no ripgrep target for $(uname -m)" >&2; exit 1 ;;
  esac
  RG_CACHE=$(node -p 'require("os").tmpdir()')/vscode-ripgrep-cache-1.15.11
  mkdir -p "$RG_CACHE"
  RG_TMP=$(mktemp -d)
  cp "$(command -v rg)" "$RG_TMP/rg"
  tar czf "$RG_CACHE/ripgrep-v13.0.0-10-$RG_TARGET.tar.gz" -C "$RG_TMP" rg
  rm -rf "$RG_TMP"
  export npm_config_unsafe_perm=true npm_config_yes=true npm_config_fund=false npm_config_audit=false
  (cd "$PREFIX" && npm install --no-save --omit=dev "code-server@$CODE_SERVER_VERSION" >&2) || {
    echo "npm install code-server failed (see above)" >&2; exit 1; }
  touch "$PREFIX/.ready"
  log "code-server installed in $(( $(date +%s) - t0 )) s"
fi
echo "$PREFIX/node_modules/.bin/code-server"
