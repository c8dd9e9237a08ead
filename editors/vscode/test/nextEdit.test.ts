// Next-edit suggestions (src/nextEdit.ts) against the real llada-lsp over stdio, no mocks of the
// server: the controller sends llada/nextEdit after its debounce, its decorations (one labelled
// set) come from the server's answer, and accepting applies one suggestion or all. A renamed
// parameter's uses follow (the edit analysis decides them); an added parameter's call gets the
// embedded model's argument (fill threshold 1e-6, option nextEdit.threshold, so it shows
// whatever its confidence: the assertions are about structure, not the model's taste).
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

const RENAME = ["def area(width, height):", "    double = width * 2", "    return double * height + width", "", "", "def main():",
  "    return area(2, 3)", ""].join("\n");
const PARAM = ["def greet(name):", "    print('hello', name)", "", "", "def main(user, greeting):", "    greet(user)", "    return user",
  ""].join("\n");

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
    assert.deepEqual(serverOptions({ ...DEFAULT_SETTINGS, nextEdit: { enabled: false, debounceMs: 10, threshold: 0.2 } }).nextEdit,
      { enabled: false, threshold: 0.2 });
  });
});

const MODEL = modelDir();

describe("next edits against the real llada-lsp", { skip: MODEL ? false : "no trained model available", timeout: 240_000 }, () => {
  let proc: ChildProcess;
  let conn: MessageConnection;
  const renameUri = "file:///tmp/llada-vscode-next-edit/rename.py";
  const paramUri = "file:///tmp/llada-vscode-next-edit/param.py";
  const texts = new Map<string, string>([[renameUri, RENAME], [paramUri, PARAM]]);
  const versions = new Map<string, number>([[renameUri, 1], [paramUri, 1]]);
  let cursor: LspPosition = { line: 0, character: 0 };
  let ready = false;
  const sent: NextEditParams[] = [];
  let rendered: (uri: string, decorations: NextEditDecoration[]) => void = () => undefined;
  const controller = new NextEditController({
    send: (params) => {
      sent.push(params);
      return conn.sendRequest<NextEditResult>(NEXT_EDIT_METHOD, params);
    },
    version: (uri) => versions.get(uri),
    cursor: () => cursor,
    render: (uri, decorations) => rendered(uri, decorations),
    enabled: () => ready,
  }, 50);

  /** The next render of `uri`'s decorations. */
  const nextRender = (uri: string): Promise<NextEditDecoration[]> => new Promise((resolve) => {
    rendered = (u, d) => {
      if (u === uri) {
        rendered = () => undefined;
        resolve(d);
      }
    };
  });

  /** Edits applied by the editor (as one change event, last first) and reported to the server. */
  async function change(uri: string, edits: { range: { start: LspPosition; end: LspPosition }; newText: string }[]): Promise<void> {
    const ordered = [...edits].sort((x, y) => offsetAt(texts.get(uri)!, y.range.start) - offsetAt(texts.get(uri)!, x.range.start));
    let text = texts.get(uri)!;
    for (const e of ordered) {
      text = applyEdits(text, [e]);
    }
    texts.set(uri, text);
    versions.set(uri, versions.get(uri)! + 1);
    await conn.sendNotification("textDocument/didChange", {
      textDocument: { uri, version: versions.get(uri) },
      contentChanges: ordered.map((e) => ({ range: e.range, text: e.newText })),
    });
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
    const init = await conn.sendRequest<{ capabilities: { experimental?: { llada?: { nextEdit?: boolean } } } }>("initialize", {
      processId: process.pid, rootUri: null,
      capabilities: { general: { positionEncodings: ["utf-16"] }, textDocument: { inlineCompletion: {} } },
      initializationOptions: { ...serverOptions(DEFAULT_SETTINGS), nextEdit: { enabled: true, threshold: 1e-6 } },
    });
    assert.equal(init.capabilities.experimental?.llada?.nextEdit, true, "advertised in the initialize result");
    await conn.sendNotification("initialized", {});
    const status = await settled;
    assert.equal(status.state, "ready", status.message);
    assert.equal(status.nextEdit, true, "llada/status says next edits can be answered");
    ready = true;
    for (const [uri, text] of texts) {
      await conn.sendNotification("textDocument/didOpen", { textDocument: { uri, languageId: "python", version: 1, text } });
    }
  });

  after(async () => {
    if (conn) {
      await conn.sendRequest("shutdown").catch(() => undefined);
      await conn.sendNotification("exit").catch(() => undefined);
      conn.dispose();
    }
    proc?.kill();
  });

  it("a renamed parameter: its uses come as one labelled set, a switch clears it, accept all applies it", async () => {
    const drawn = nextRender(renameUri);
    const at = (c: number): LspPosition => ({ line: 0, character: c });
    await change(renameUri, [{ range: { start: at(9), end: at(14) }, newText: "wide" }]); // width -> wide
    cursor = at(13);
    controller.changed(renameUri, { start: at(0), end: at(0) });
    assert.equal(sent.length, 0, "nothing before the debounce");
    const decorations = await drawn;
    assert.equal(sent.length, 1);
    const answer = controller.answers.get(renameUri)!;
    assert.equal(answer.kind, "rename", JSON.stringify(answer));
    const shown = controller.suggestions(renameUri);
    assert.deepEqual(shown.map((s) => [s.range.start.line, s.oldText, s.newText, s.source]),
      [[1, "width", "wide", "analysis"], [2, "width", "wide", "analysis"]]);
    assert.deepEqual(decorations.map((d) => d.label), ["next edit 1/2 · rename", "next edit 2/2 · rename"]);
    const text = texts.get(renameUri)!;
    for (const [i, s] of shown.entries()) {
      assert.equal(text.slice(offsetAt(text, s.range.start), offsetAt(text, s.range.end)), s.oldText, "UTF-16 ranges");
      assert.deepEqual(decorations[i].range, s.range);
      assert.equal(decorations[i].after, "wide");
    }
    const cleared = nextRender(renameUri);
    controller.switched(paramUri); // another editor became active
    assert.deepEqual(await cleared, []);
    assert.deepEqual(controller.suggestions(renameUri), []);
    await controller.request(renameUri); // back: asked again
    const edits = controller.acceptAll(renameUri);
    assert.equal(edits.length, 2);
    assert.deepEqual(controller.suggestions(renameUri), [], "the set is cleared");
    await change(renameUri, edits);
    assert.equal(texts.get(renameUri), RENAME.replaceAll("width", "wide"));
    const after = await controller.request(renameUri);
    assert.deepEqual(after?.suggestions, [], "nothing left to follow");
  });

  it("an added parameter: the call gets the model's argument, jumped to and accepted", async () => {
    const drawn = nextRender(paramUri);
    const at = { line: 0, character: 14 }; // def greet(name|)
    await change(paramUri, [{ range: { start: at, end: at }, newText: ", greeting" }]);
    cursor = { line: 0, character: 24 };
    controller.changed(paramUri, { start: { line: 0, character: 0 }, end: { line: 0, character: 0 } });
    const decorations = await drawn;
    const answer = controller.answers.get(paramUri)!;
    assert.equal(answer.kind, "param_added", JSON.stringify(answer));
    const [s] = controller.suggestions(paramUri);
    assert.equal(controller.suggestions(paramUri).length, 1);
    assert.equal(s.range.start.line, 5);
    assert.deepEqual(s.range.start, s.range.end, "an insertion");
    assert.ok(s.newText.startsWith(", ") && s.newText.length > 2, s.newText);
    assert.equal(s.source, "model");
    assert.equal(decorations[0].label, "next edit 1/1 · param_added");
    const jump = controller.jump(paramUri, cursor)!;
    assert.deepEqual(jump, s.range.start);
    const edit = controller.accept(paramUri, jump)!;
    await change(paramUri, [edit]);
    assert.equal(texts.get(paramUri)!.split("\n")[5], `    greet(user${s.newText})`);
  });
});
