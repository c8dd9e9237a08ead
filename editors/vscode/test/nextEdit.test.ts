// Next-edit suggestions (src/nextEdit.ts) against the real llada-lsp over stdio, no mocks of the
// server: the controller sends llada/nextEdit after its debounce, its decorations come from the
// server's answer, and accepting applies the suggestion. The server's edit threshold is 1e-6
// (option nextEdit.threshold), so the broken lines around the edit must get suggestions: the
// assertions are about structure, not the model's taste.
import assert from "node:assert/strict";
import { spawn, type ChildProcess } from "node:child_process";
import * as fs from "node:fs";
import * as path from "node:path";
import { after, before, describe, it } from "node:test";
import {
  createMessageConnection,
  StreamMessageReader,
  StreamMessageWriter,
  type MessageConnection,
} from "vscode-jsonrpc/node";
import { applyEdits, DEFAULT_SETTINGS, offsetAt, serverOptions, type LspPosition, type StatusParams } from "../src/core";
import {
  NEXT_EDIT_METHOD,
  NextEditController,
  acceptTarget,
  decorationOf,
  jumpTarget,
  type NextEditDecoration,
  type NextEditParams,
  type NextEditResult,
  type NextEditSuggestion,
} from "../src/nextEdit";

const ROOT = path.resolve(__dirname, "../../../..");

function modelDir(): string | undefined {
  const cands = [process.env.LLADA_MODEL, path.join(ROOT, "engine/checkpoints/tiny-code"), path.join(ROOT, "runs/embedded/latest")];
  return cands.find((c): c is string => !!c && fs.existsSync(path.join(c, "config.json")));
}

function serverCommand(): [string, string[]] {
  if (process.env.LLADA_LSP) {
    return [process.env.LLADA_LSP, []];
  }
  const venv = path.join(ROOT, ".venv/bin/llada-lsp");
  return fs.existsSync(venv) ? [venv, []] : ["python3", ["-m", "llada_lsp"]];
}

const BROKEN = "    return x +@@ qq] zz (( 7 7 7 )) ::";
const LINES = ["import os", "", "", "def f(x):", BROKEN, "", "", "def g(a):", "    y = a", BROKEN, "", "", "def h(b):",
  "    s = 'naïve 😀' + s[+@@ ]", ""];
const EDIT_LINE = 8; // 0-based: "    y = a" becomes "    y = a + 1"

const suggestion = (l1: number, c1: number, l2: number, c2: number, newText: string): NextEditSuggestion => ({
  range: { start: { line: l1, character: c1 }, end: { line: l2, character: c2 } }, newText, oldText: "x", confidence: 0.5, line: l1,
});

describe("next-edit helpers", () => {
  it("targets: accept takes the cursor's line, jump the next line, both wrap", () => {
    const s = [suggestion(2, 0, 2, 3, "a"), suggestion(5, 1, 5, 2, "b"), suggestion(9, 0, 10, 0, "c\n")];
    assert.equal(acceptTarget(s, { line: 5, character: 9 }), s[1]);
    assert.equal(jumpTarget(s, { line: 5, character: 9 }), s[2]);
    assert.equal(acceptTarget(s, { line: 6, character: 0 }), s[2]);
    assert.equal(jumpTarget(s, { line: 11, character: 0 }), s[0]);
    assert.equal(acceptTarget(s, { line: 10, character: 0 }), s[2], "a range over the cursor's line");
    assert.equal(jumpTarget([s[1]], { line: 5, character: 0 }), s[1], "the only one");
  });

  it("draws the new text after the old, line breaks marked", () => {
    assert.equal(decorationOf(suggestion(0, 0, 0, 1, "ab")).after, "ab");
    assert.equal(decorationOf(suggestion(0, 0, 1, 0, "ab\ncd\n")).after, "ab ⏎ cd");
  });

  it("sends the server's part of the settings only when changed", () => {
    assert.equal("nextEdit" in serverOptions(DEFAULT_SETTINGS), false);
    assert.deepEqual(serverOptions({ ...DEFAULT_SETTINGS, nextEdit: { enabled: false, debounceMs: 10, windowLines: 5, threshold: 0.2 } }).nextEdit,
      { enabled: false, windowLines: 5, threshold: 0.2 });
  });
});

const MODEL = modelDir();

describe("next edits against the real llada-lsp", { skip: MODEL ? false : "no trained model available", timeout: 240_000 }, () => {
  let proc: ChildProcess;
  let conn: MessageConnection;
  const uri = "file:///tmp/llada-vscode-next-edit/ne.py";
  let text = LINES.join("\n");
  let version = 1;
  let cursor: LspPosition = { line: EDIT_LINE, character: 0 };
  let ready = false;
  const sent: NextEditParams[] = [];
  let rendered: (decorations: NextEditDecoration[]) => void = () => undefined;
  const controller = new NextEditController({
    send: (params) => {
      sent.push(params);
      return conn.sendRequest<NextEditResult>(NEXT_EDIT_METHOD, params);
    },
    version: () => version,
    cursor: () => cursor,
    render: (_uri, decorations) => rendered(decorations),
    enabled: () => ready,
  }, 50);

  /** The next render of the controller's decorations. */
  const nextRender = (): Promise<NextEditDecoration[]> => new Promise((resolve) => {
    rendered = (d) => {
      rendered = () => undefined;
      resolve(d);
    };
  });

  async function change(start: LspPosition, end: LspPosition, newText: string): Promise<void> {
    text = applyEdits(text, [{ range: { start, end }, newText }]);
    version += 1;
    await conn.sendNotification("textDocument/didChange", { textDocument: { uri, version }, contentChanges: [{ range: { start, end }, text: newText }] });
  }

  before(async () => {
    const [cmd, args] = serverCommand();
    proc = spawn(cmd, args, {
      cwd: ROOT,
      env: { ...process.env, LLADA_MODEL: MODEL, OMP_NUM_THREADS: process.env.OMP_NUM_THREADS ?? "1" },
      stdio: ["pipe", "pipe", process.env.LLADA_TEST_VERBOSE ? "inherit" : "ignore"],
    });
    conn = createMessageConnection(new StreamMessageReader(proc.stdout!), new StreamMessageWriter(proc.stdin!));
    const settled = new Promise<StatusParams>((resolve) => {
      conn.onNotification("llada/status", (s: StatusParams) => {
        if (s.state === "ready" || s.state === "error") {
          resolve(s);
        }
      });
    });
    for (const m of ["window/showMessage", "$/progress", "llada/refine", "llada/stats"]) {
      conn.onNotification(m, () => undefined);
    }
    conn.onRequest("window/workDoneProgress/create", () => null);
    conn.listen();
    const settings = { ...DEFAULT_SETTINGS, nextEdit: { ...DEFAULT_SETTINGS.nextEdit, windowLines: 6, threshold: 1e-6 } };
    const init = await conn.sendRequest<{ capabilities: { experimental?: { llada?: { nextEdit?: boolean } } } }>("initialize", {
      processId: process.pid, rootUri: null,
      capabilities: { general: { positionEncodings: ["utf-16"] }, textDocument: { inlineCompletion: {} } },
      initializationOptions: { ...serverOptions(settings), nextEdit: { windowLines: 6, threshold: 1e-6, maxPasses: 2 } },
    });
    assert.equal(init.capabilities.experimental?.llada?.nextEdit, true, "advertised in the initialize result");
    await conn.sendNotification("initialized", {});
    const status = await settled;
    assert.equal(status.state, "ready", status.message);
    assert.equal(status.nextEdit, true, "llada/status says next edits can be answered");
    ready = true;
    await conn.sendNotification("textDocument/didOpen", { textDocument: { uri, languageId: "python", version, text } });
  });

  after(async () => {
    if (conn) {
      await conn.sendRequest("shutdown").catch(() => undefined);
      await conn.sendNotification("exit").catch(() => undefined);
      conn.dispose();
    }
    proc?.kill();
  });

  it("sends one request after a burst of edits, and draws the answer", async (t) => {
    const drawn = nextRender();
    for (const ch of [" ", "+", " ", "1"]) { // typing "    y = a + 1"
      const at = { line: EDIT_LINE, character: text.split("\n")[EDIT_LINE].length };
      await change(at, at, ch);
      cursor = { line: EDIT_LINE, character: at.character + 1 };
      controller.changed(uri, { start: { line: EDIT_LINE, character: 0 }, end: { line: EDIT_LINE, character: 0 } });
      assert.equal(sent.length, 0, "nothing before the debounce");
      assert.ok(controller.pending(uri));
    }
    const decorations = await drawn;
    assert.equal(sent.length, 1, "one request for the burst");
    assert.equal(sent[0].textDocument.version, version);
    assert.deepEqual(sent[0].position, { line: EDIT_LINE, character: 13 });
    const shown = controller.suggestions(uri);
    const answer = controller.answers.get(uri)!;
    assert.equal(answer.version, version);
    assert.ok(shown.length > 0, `suggestions at threshold 1e-6 (${answer.reason ?? ""})`);
    assert.equal(decorations.length, shown.length);
    for (const [i, s] of shown.entries()) {
      assert.notEqual(s.range.start.line, EDIT_LINE);
      assert.ok(s.range.end.line < EDIT_LINE || s.range.start.line > EDIT_LINE, "never the edited line");
      assert.ok(Math.abs(s.range.start.line - EDIT_LINE) <= 7);
      assert.equal(text.slice(offsetAt(text, s.range.start), offsetAt(text, s.range.end)), s.oldText, "UTF-16 ranges");
      assert.notEqual(s.newText, s.oldText);
      assert.deepEqual(decorations[i].range, s.range);
      assert.ok(decorations[i].after.startsWith(s.newText.split("\n")[0]));
    }
    t.diagnostic(`${shown.length} suggestions: ${JSON.stringify(shown.map((s) => [s.oldText, s.newText]))}`);
  });

  it("accepts the suggestion at the cursor: the edit applies, the rest are cleared", async () => {
    const shown = controller.suggestions(uri);
    assert.ok(shown.length > 0);
    const jump = controller.jump(uri, cursor);
    assert.ok(jump && jump.line !== EDIT_LINE);
    cursor = jump;
    const target = acceptTarget(shown, cursor)!;
    const edit = controller.accept(uri, cursor);
    assert.deepEqual(edit, { range: target.range, newText: target.newText });
    const expected = text.slice(0, offsetAt(text, target.range.start)) + target.newText + text.slice(offsetAt(text, target.range.end));
    const redrawn = nextRender();
    await change(edit.range.start, edit.range.end, edit.newText); // the editor applies it ...
    controller.changed(uri, { start: edit.range.start, end: edit.range.start }); // ... and reports the change
    assert.equal(text, expected);
    assert.deepEqual(controller.suggestions(uri), [], "cleared by the edit");
    await redrawn; // asked again for the accepted text
    assert.equal(controller.answers.get(uri)?.version, version);
  });

  it("drops an answer for a version the document has left", async () => {
    const asked = controller.request(uri);
    const at = { line: 0, character: 0 };
    await change(at, at, "# x\n");
    assert.equal(await asked, undefined);
  });
});
