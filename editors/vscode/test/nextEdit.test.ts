// Next-edit suggestions (src/nextEdit.ts) against the real llada-lsp over stdio, no mocks of the
// server: the controller sends llada/nextEdit after its debounce, its decorations (one labelled
// set) come from the server's answer, and accepting applies one suggestion or all. A renamed
// parameter's uses follow (the edit analysis decides them); an added parameter's call gets the
// embedded model's argument (fill threshold 1e-6, option nextEdit.threshold, so it shows
// whatever its confidence: the assertions are about structure, not the model's taste).
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import type { MessageConnection } from "vscode-jsonrpc/node";
import { applyEdits, DEFAULT_SETTINGS, offsetAt, serverOptions, type LspPosition, type StatusParams } from "../src/core";
import {
  NEXT_EDIT_METHOD,
  NextEditController,
  acceptTarget,
  decorationOf,
  jumpTarget,
  placeholderOf,
  placeholderRange,
  type NextEditDecoration,
  type NextEditParams,
  type NextEditResult,
  type NextEditSuggestion,
} from "../src/nextEdit";
import { modelDir, startServer, stopServer, type RealServer } from "./realServer";


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

  it("placeholders: the part drawn apart, the range selected after an accept, a bad one ignored", () => {
    const at = (line: number, c: number, newText: string, start: number, end: number): NextEditSuggestion => ({
      ...suggestion(line, c, line, c, newText), oldText: "", confidence: 0, source: "placeholder", placeholder: { start, end },
    });
    const appended = at(3, 6, ", timeout", 2, 9); // f(1, 2|) -> f(1, 2, timeout)
    assert.deepEqual(decorationOf(appended).placeholder, { before: ", ", text: "timeout", after: "" });
    assert.deepEqual(placeholderRange(appended), { start: { line: 3, character: 8 }, end: { line: 3, character: 15 } });
    const first = at(0, 2, "x, ", 0, 1); // f(|a) -> f(x, a)
    assert.deepEqual(decorationOf(first).placeholder, { before: "", text: "x", after: ", " });
    // UTF-16 code units: "😀" is two, so `deadline` is units 7 to 15
    const wide = at(1, 4, ", 😀 = deadline", 7, 15);
    assert.equal(decorationOf(wide).placeholder?.text, "deadline");
    assert.deepEqual(placeholderRange(wide), { start: { line: 1, character: 11 }, end: { line: 1, character: 19 } });
    const lines = at(2, 0, "a,\n    name", 7, 11); // on the next line
    assert.deepEqual(placeholderRange(lines), { start: { line: 3, character: 4 }, end: { line: 3, character: 8 } });
    assert.equal(decorationOf(lines).placeholder?.before, "a, ⏎     ");
    for (const bad of [{ start: 2, end: 99 }, { start: 5, end: 2 }, { start: -1, end: 2 }, { start: 0.5, end: 2 }]) {
      const s = { ...appended, placeholder: bad };
      assert.equal(placeholderOf(s), undefined, JSON.stringify(bad));
      assert.equal(decorationOf(s).placeholder, undefined);
      assert.equal(decorationOf(s).after, ", timeout");
    }
  });

  it("accepting one placeholder suggestion selects it; accepting all selects nothing", async () => {
    const uri = "file:///p.py";
    const answer: NextEditResult = { version: 1, kind: "param_added", suggestions: [
      { ...suggestion(5, 10, 5, 10, ", timeout"), oldText: "", source: "placeholder", placeholder: { start: 2, end: 9 } },
      { ...suggestion(6, 10, 6, 10, ", timeout"), oldText: "", source: "placeholder", placeholder: { start: 2, end: 9 } },
    ] };
    const drawn: NextEditDecoration[][] = [];
    const c = new NextEditController({
      send: () => Promise.resolve(answer), version: () => 1, cursor: () => ({ line: 0, character: 0 }),
      render: (_u, d) => drawn.push(d), enabled: () => true,
    }, 0);
    await c.request(uri);
    assert.deepEqual(drawn[0].map((d) => d.placeholder?.text), ["timeout", "timeout"]);
    assert.deepEqual(c.accept(uri, { line: 6, character: 0 }), {
      range: answer.suggestions[1].range, newText: ", timeout",
      select: { start: { line: 6, character: 12 }, end: { line: 6, character: 19 } },
    });
    await c.request(uri);
    assert.deepEqual(c.acceptAll(uri), answer.suggestions.map((s) => ({ range: s.range, newText: s.newText })));
  });

  it("sends the server's part of the settings only when changed", () => {
    assert.equal("nextEdit" in serverOptions(DEFAULT_SETTINGS), false);
    assert.deepEqual(serverOptions({ ...DEFAULT_SETTINGS, nextEdit: { enabled: false, debounceMs: 10, threshold: 0.2 } }).nextEdit,
      { enabled: false, threshold: 0.2 });
  });
});

const MODEL = modelDir();

describe("next edits against the real llada-lsp", { skip: MODEL ? false : "no trained model available", timeout: 420_000 }, () => {
  let server: RealServer | undefined;
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
    let settle: (s: StatusParams) => void = () => undefined;
    const settled = new Promise<StatusParams>((resolve) => {
      settle = resolve;
    });
    server = startServer(MODEL!, (c) => {
      c.onNotification("llada/status", (s: StatusParams) => {
        if (s.state === "ready" || s.state === "error") {
          settle(s);
        }
      });
      for (const m of ["window/showMessage", "$/progress", "llada/refine", "llada/stats"]) {
        c.onNotification(m, () => undefined);
      }
      c.onRequest("window/workDoneProgress/create", () => null);
    });
    conn = server.conn;
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

  after(() => stopServer(server));

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
