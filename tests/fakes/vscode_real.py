"""Real VS Code for the tests and bench/vscode_busy.py: code-server 4.100.3 (VS Code 1.100.3) with the extension's .vsix
installed, in Debian's chromium driven by Playwright (editors/vscode/test-real/setup.sh
installs them, cached). `CodeServer` starts one on a free port with its own user-data and
extensions directories and user settings; `Workbench` reads the editor's DOM: Monaco's ghost
text, the view lines, the status bar, the next-edit decorations."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

ROOT = Path(__file__).resolve().parents[2]
VSCODE = ROOT / "editors" / "vscode"
SETUP = VSCODE / "test-real" / "setup.sh"
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]
T = TypeVar("T")


@contextlib.contextmanager
def vscode_build_lock() -> Iterator[None]:
    """Held while a test builds or installs editors/vscode's outputs (`npm ci`, out/, the .vsix,
    code-server's cached install): `./dev test` runs two pytest workers, and two tests
    rebuilding them at once would delete or rewrite each other's files. One lock per checkout,
    across processes (flock: released by the kernel if its holder dies)."""
    key = hashlib.sha1(str(ROOT).encode()).hexdigest()[:12]
    with (Path(tempfile.gettempdir()) / f"llada-lsp-vscode-build-{key}.lock").open("a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def install() -> tuple[str, float]:
    """Run setup.sh (cached); (code-server's path, seconds it took)."""
    t0 = time.monotonic()
    proc = subprocess.run(["bash", str(SETUP)], capture_output=True, text=True, timeout=1500, check=False,
                          env={**os.environ, "PYTHON": sys.executable})
    if proc.returncode != 0:
        raise RuntimeError(f"{SETUP} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}")
    return proc.stdout.strip().splitlines()[-1], time.monotonic() - t0


def build_vsix() -> Path:
    """npm ci (when node_modules is missing), build, package: editors/vscode/llada.vsix (kept
    while it is newer than the extension's sources)."""
    npm = shutil.which("npm")
    assert npm is not None
    vsix = VSCODE / "llada.vsix"
    sources = [*VSCODE.glob("src/*.ts"), *VSCODE.glob("scripts/*"), VSCODE / "package.json", VSCODE / "package-lock.json"]
    if vsix.exists() and (VSCODE / "out" / "checkout.json").exists() \
            and vsix.stat().st_mtime > max(p.stat().st_mtime for p in sources):
        return vsix
    steps = [["run", "build"], ["run", "package"]]
    if not (VSCODE / "node_modules" / ".package-lock.json").exists():
        steps.insert(0, ["ci", "--no-audit", "--no-fund"])
    for step in steps:
        proc = subprocess.run([npm, *step], cwd=VSCODE, capture_output=True, text=True, timeout=600, check=False)
        assert proc.returncode == 0, f"npm {' '.join(step)}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return vsix


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# A workbench that only the extension draws on: inline suggestions on, VS Code's own suggest
# widget, tips, trust prompts, telemetry and updates off.
QUIET_SETTINGS: dict[str, Any] = {
    "editor.inlineSuggest.enabled": True,
    "editor.quickSuggestions": {"other": False, "comments": False, "strings": False},
    "editor.suggestOnTriggerCharacters": False,
    "workbench.startupEditor": "none",
    "workbench.tips.enabled": False,
    "security.workspace.trust.enabled": False,
    "telemetry.telemetryLevel": "off",
    "extensions.autoUpdate": False,
    "extensions.autoCheckUpdates": False,
    "update.mode": "none",
    "python.defaultInterpreterPath": "",
}
WATCHDOG_S = 120.0  # the waits are for what must come: a hang guard, generous for a machine shared 2x or more


def wait_for(what: str, fn: Callable[[], T | None], timeout: float = WATCHDOG_S, every: float = 0.05) -> T:
    """Poll `fn` until it returns something truthy (the screen has no event to wait on)."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = fn()
        if last:
            return last
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout:g} s waiting for {what} (last: {last!r})")


class CodeServer:
    """One code-server process serving `folder`, with the given user settings."""

    def __init__(self, binary: str, home: Path, vsix: Path, settings: dict[str, Any]) -> None:
        self.binary, self.home = binary, home
        self.user_data = home / "user-data"
        self.extensions = home / "extensions"
        self.settings_file = self.user_data / "User" / "settings.json"
        self.settings_file.parent.mkdir(parents=True, exist_ok=True)
        self.write_settings(settings)
        (home / "config.yaml").write_text("auth: none\ncert: false\n")
        self.env = {**os.environ, "HOME": str(home), "XDG_CONFIG_HOME": str(home / "config"),
                    "XDG_DATA_HOME": str(home / "data")}
        proc = subprocess.run([binary, "--config", str(home / "config.yaml"), "--user-data-dir", str(self.user_data),
                               "--extensions-dir", str(self.extensions), "--install-extension", str(vsix)],
                              capture_output=True, text=True, timeout=300, env=self.env, check=False)
        assert proc.returncode == 0, f"installing the .vsix failed:\n{proc.stdout}\n{proc.stderr}"
        self.install_output = proc.stdout
        self.port = free_port()
        self.log = open(home / "code-server.log", "w")  # noqa: SIM115 - closed in stop()
        self.proc: subprocess.Popen[bytes] | None = None

    def write_settings(self, settings: dict[str, Any]) -> None:
        self.settings = settings
        self.settings_file.write_text(json.dumps(settings, indent=2))

    def start(self, folder: Path) -> str:
        self.proc = subprocess.Popen(
            [self.binary, "--config", str(self.home / "config.yaml"), "--auth", "none",
             "--bind-addr", f"127.0.0.1:{self.port}", "--user-data-dir", str(self.user_data),
             "--extensions-dir", str(self.extensions), "--disable-telemetry", "--disable-update-check",
             "--disable-workspace-trust", "--disable-getting-started-override", str(folder)],
            stdout=self.log, stderr=subprocess.STDOUT, env=self.env)

        def up() -> bool:
            assert self.proc is not None and self.proc.poll() is None, (self.home / "code-server.log").read_text()
            with socket.socket() as s:
                return s.connect_ex(("127.0.0.1", self.port)) == 0

        wait_for("code-server to listen", up, timeout=WATCHDOG_S)
        return f"http://127.0.0.1:{self.port}/?folder={folder}"

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.log.close()


# The page side: text of Monaco's ghost text (the inline part and any further lines), the
# editor's lines, the status bar items, and the next-edit decorations (a struck-out span and
# the new text, which VS Code draws as an ::after pseudo-element of a decoration span).
JS_HELPERS = r"""
() => {
  const clean = (s) => (s || '').replace(/\u00a0/g, ' ');
  window.__llada = {
    editor() { return document.querySelector('.editor-instance .monaco-editor') || document.querySelector('.monaco-editor'); },
    isGhost(e) { return [...e.classList].some((c) => c.startsWith('ghost-text-decoration')); },
    // the ghost text: its spans inside the cursor's line, then the lines of its view zone
    ghost() {
      const ed = this.editor(); if (!ed) return '';
      const inline = [...ed.querySelectorAll('.view-lines span')].filter((e) => this.isGhost(e))
        .map((e) => clean(e.textContent)).join('');
      const more = [...ed.querySelectorAll('.ghost-text .view-line')].map((l) => clean(l.textContent));
      return [inline, ...more].join('\n');
    },
    // the document's lines as drawn, without the ghost text
    lines() {
      const ed = this.editor(); if (!ed) return [];
      const text = (l) => [...l.querySelectorAll('span')].filter((e) => !e.querySelector('span') && !this.isGhost(e))
        .map((e) => clean(e.textContent)).join('');
      return [...ed.querySelectorAll('.view-lines .view-line')]
        .map((l) => ({ top: parseFloat(l.style.top) || 0, text: text(l) }))
        .sort((a, b) => a.top - b.top).map((l) => l.text);
    },
    status() {
      return [...document.querySelectorAll('.statusbar-item')]
        .map((e) => ({ id: e.id, text: clean(e.innerText).trim(), label: e.getAttribute('aria-label') || '',
                       error: e.classList.contains('error-kind') || e.style.backgroundColor !== '' }))
        .filter((s) => /llada/.test(s.id + ' ' + s.text + ' ' + s.label));
    },
    nextEdits() {
      const ed = this.editor(); if (!ed) return { struck: [], added: [] };
      const spans = [...ed.querySelectorAll('.view-lines span')];
      const struck = spans.filter((s) => getComputedStyle(s).textDecorationLine.includes('line-through'))
        .map((s) => clean(s.textContent));
      const added = spans.map((s) => getComputedStyle(s, '::after').content)
        .filter((c) => c && c !== 'none' && c !== 'normal').map((c) => clean(c.replace(/^"|"$/g, '')));
      return { struck, added };
    },
    // per line (as drawn, top to bottom): its text and the decorations' drawn text in order
    // (each span's ::before, then its ::after), italic and dashed-border flags with each
    nextEditParts() {
      const ed = this.editor(); if (!ed) return [];
      const part = (s, pseudo) => {
        const st = getComputedStyle(s, pseudo);
        const c = st.content;
        if (!c || c === 'none' || c === 'normal') return null;
        return { text: clean(c.replace(/^"|"$/g, '')), italic: st.fontStyle === 'italic', dashed: st.borderTopStyle === 'dashed' };
      };
      const text = (l) => [...l.querySelectorAll('span')].filter((e) => !e.querySelector('span') && !this.isGhost(e))
        .map((e) => clean(e.textContent)).join('');
      return [...ed.querySelectorAll('.view-lines .view-line')]
        .map((l) => ({ top: parseFloat(l.style.top) || 0, text: text(l),
                       parts: [...l.querySelectorAll('span')].flatMap((s) => [part(s, '::before'), part(s, '::after')]).filter((x) => x) }))
        .sort((a, b) => a.top - b.top).map(({ text, parts }) => ({ text, parts }));
    },
    // how many selection highlights the editor draws (a non-empty selection has at least one)
    selections() {
      const ed = this.editor(); if (!ed) return 0;
      return ed.querySelectorAll('.view-overlays .selected-text').length;
    },
    // every distinct ghost text, with the wall-clock time it was first on screen
    log: [],
    watch() {
      const seen = () => {
        const g = this.ghost();
        const last = this.log.length ? this.log[this.log.length - 1].text : null;
        if (g !== last) this.log.push({ text: g, t: Date.now() });
      };
      new MutationObserver(seen).observe(document.body, { subtree: true, childList: true, characterData: true });
      seen();
    },
  };
}
"""


class Workbench:
    """A Playwright page on code-server's workbench."""

    def __init__(self, page: Any) -> None:
        self.page = page

    def install_helpers(self) -> None:
        self.page.evaluate(JS_HELPERS)
        self.page.evaluate("() => window.__llada.watch()")

    def call(self, name: str) -> Any:
        return self.page.evaluate(f"() => window.__llada.{name}()")

    def ghost(self) -> str:
        return str(self.call("ghost"))

    def lines(self) -> list[str]:
        return list(self.call("lines"))

    def status(self) -> list[dict[str, Any]]:
        return list(self.call("status"))

    def next_edits(self) -> dict[str, list[str]]:
        return dict(self.call("nextEdits"))

    def next_edit_parts(self) -> list[dict[str, Any]]:
        return list(self.call("nextEditParts"))

    def selections(self) -> int:
        return int(self.call("selections"))

    def ghost_log(self) -> list[dict[str, Any]]:
        return list(self.page.evaluate("() => window.__llada.log"))

    def open_file(self, name: str) -> None:
        self.page.keyboard.press("Control+P")
        self.page.wait_for_selector(".quick-input-widget input", state="visible")
        self.page.keyboard.type(name)
        # the row of that very file (the list may still show the recent files, or a longer name first)
        row = wait_for(f"{name} in quick open", lambda: next(
            (r for r in self.page.query_selector_all(".quick-input-list .monaco-list-row")
             if (label := r.query_selector(".label-name")) is not None and label.inner_text().strip() == name), None))
        row.click()
        wait_for(f"{name} open", lambda: self.page.query_selector(f'.tab[data-resource-name="{name}"]'), timeout=WATCHDOG_S)
        self.page.click(".editor-instance .monaco-editor .view-lines")

    def run_command(self, title: str) -> None:
        self.page.keyboard.press("Control+Shift+P")
        self.page.wait_for_selector(".quick-input-widget input", state="visible")
        self.page.keyboard.type(title)
        wait_for(f"command {title!r}", lambda: self.page.query_selector(".quick-input-list .monaco-list-row"))
        self.page.keyboard.press("Enter")


@contextlib.contextmanager
def open_workbench(url: str, home: Path, file: str) -> Iterator[tuple[Workbench, Any]]:
    """Debian's chromium (Playwright, `executable_path`) on code-server's workbench at `url`,
    with `file` open and the page helpers installed; closed on exit."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch_persistent_context(
            str(home / "chromium-profile"), executable_path=shutil.which("chromium") or "/usr/bin/chromium",
            headless=True, args=CHROMIUM_FLAGS, viewport={"width": 1400, "height": 900})
        try:
            page = browser.new_page()
            page.goto(url)
            page.wait_for_selector(".monaco-workbench", timeout=120_000)
            wb = Workbench(page)
            wb.open_file(file)
            wb.install_helpers()
            yield wb, page
        finally:
            browser.close()


@contextlib.contextmanager
def vscode_session(home: Path, files: dict[str, str], settings: dict[str, Any],
                   env: dict[str, str | None]) -> Iterator[tuple[Workbench, Any, CodeServer, float]]:
    """A real-VS-Code test's set-up: code-server (installed, cached) with the .vsix built from
    this checkout and `settings`, serving home/project with `files` in it, the first of them open
    in chromium; `env` changes code-server's environment (None: the variable is removed).
    (workbench, page, code-server, set-up seconds); code-server stopped on exit."""
    with vscode_build_lock():  # another worker's test may be building them (vscode_build_lock above)
        binary, setup_s = install()
        vsix = build_vsix()
        folder = home / "project"
        folder.mkdir()
        for name, text in files.items():
            (folder / name).write_text(text)
        cs = CodeServer(binary, home, vsix, settings)
    for key, value in env.items():
        if value is None:
            cs.env.pop(key, None)
        else:
            cs.env[key] = value
    url = cs.start(folder)
    try:
        with open_workbench(url, home, next(iter(files))) as (wb, page):
            yield wb, page, cs, setup_s
    finally:
        cs.stop()
