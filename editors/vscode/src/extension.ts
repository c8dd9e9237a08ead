// The VS Code side: starts llada-lsp through vscode-languageclient, shows its inline
// completions, re-triggers the inline suggestion when `llada/refine` changes the shown one,
// shows `llada/stats` in the status bar, and draws next-edit suggestions as decorations
// (llada.nextEdit.jump / accept / dismiss). The protocol logic lives in ./core and ./nextEdit.
import * as fs from "node:fs";
import * as path from "node:path";
import * as vscode from "vscode";
import {
  LanguageClient,
  type LanguageClientOptions,
  type ServerOptions,
} from "vscode-languageclient/node";
import {
  DEFAULT_SETTINGS,
  SuggestionTracker,
  answerFromTracker,
  describeStats,
  formatStats,
  machineValue,
  resolveServerCommand,
  serverOptions,
  statusName,
  type LspInlineItem,
  type RefineParams,
  type Settings,
  type StatsParams,
  type StatusParams,
} from "./core";
import { NEXT_EDIT_METHOD, NextEditController, type NextEditDecoration, type NextEditResult } from "./nextEdit";

let client: LanguageClient | undefined;
let status: vscode.StatusBarItem;
let output: vscode.LogOutputChannel;
const tracker = new SuggestionTracker();
let retrigger: NodeJS.Timeout | undefined;
let ownRetrigger = false; // the next provider call is the extension's re-trigger, not the user's
let nextEditServer = false; // llada/status says llada/nextEdit can answer
let nextEdits: NextEditController;
let oldTextDecoration: vscode.TextEditorDecorationType;
let newTextDecoration: vscode.TextEditorDecorationType;
let labelDecoration: vscode.TextEditorDecorationType; // "next edit k/N · kind" at a site's line end

function readSettings(): Settings {
  const c = vscode.workspace.getConfiguration("llada");
  // machine-scoped (core.MACHINE_SETTINGS): the user's values only, never the workspace's
  const machine = <T>(key: "serverPath" | "engine" | "model", fallback: T): T => machineValue(c.inspect<T>(key), fallback);
  return {
    mode: c.get<Settings["mode"]>("mode", DEFAULT_SETTINGS.mode),
    engine: machine("engine", DEFAULT_SETTINGS.engine),
    enabledLanguages: c.get<string[]>("enabledLanguages", DEFAULT_SETTINGS.enabledLanguages),
    maxTokens: c.get<Settings["maxTokens"]>("maxTokens", DEFAULT_SETTINGS.maxTokens),
    serverPath: machine("serverPath", DEFAULT_SETTINGS.serverPath),
    model: machine("model", DEFAULT_SETTINGS.model),
    debounceMs: c.get<number>("debounceMs", DEFAULT_SETTINGS.debounceMs),
    alternatives: c.get<number>("alternatives", DEFAULT_SETTINGS.alternatives),
    invokedAlternatives: c.get<number>("invokedAlternatives", DEFAULT_SETTINGS.invokedAlternatives),
    nextEdit: {
      enabled: c.get<boolean>("nextEdit.enabled", DEFAULT_SETTINGS.nextEdit.enabled),
      debounceMs: c.get<number>("nextEdit.debounceMs", DEFAULT_SETTINGS.nextEdit.debounceMs),
      windowLines: c.get<number>("nextEdit.windowLines", DEFAULT_SETTINGS.nextEdit.windowLines),
      threshold: c.get<number | null>("nextEdit.threshold", DEFAULT_SETTINGS.nextEdit.threshold),
    },
  };
}

function serverCommand(settings: Settings): ServerOptions {
  const trusted = vscode.workspace.isTrusted;
  const py = vscode.workspace.getConfiguration("python");
  // an untrusted workspace's own interpreter setting is not followed either
  const python = trusted ? py.get<string>("defaultInterpreterPath") : py.inspect<string>("defaultInterpreterPath")?.globalValue;
  const cmd = resolveServerCommand({
    serverPath: settings.serverPath,
    pythonPath: python,
    workspaceFolders: (vscode.workspace.workspaceFolders ?? []).map((f) => f.uri.fsPath),
    trusted,
    platform: process.platform,
    exists: (p) => fs.existsSync(p),
    join: (...parts) => path.join(...parts),
    dirname: (p) => path.dirname(p),
  });
  output.appendLine(`starting ${cmd.command} ${cmd.args.join(" ")}`);
  return { command: cmd.command, args: cmd.args, options: { env: { ...process.env } } };
}

function setStatus(text: string, tooltip: string): void {
  status.text = text;
  status.tooltip = tooltip;
  status.show();
}

/** Ask VS Code to show the refined suggestion (coalesced: one re-trigger per burst). */
function scheduleRetrigger(uri: string): void {
  if (retrigger) {
    return;
  }
  retrigger = setTimeout(() => {
    retrigger = undefined;
    const editor = vscode.window.activeTextEditor;
    if (editor && client && client.code2ProtocolConverter.asUri(editor.document.uri) === uri) {
      ownRetrigger = true;
      void vscode.commands.executeCommand("editor.action.inlineSuggest.trigger");
    }
  }, 15);
}

function toLspItems(result: vscode.InlineCompletionItem[] | vscode.InlineCompletionList | null | undefined): LspInlineItem[] {
  const items = Array.isArray(result) ? result : (result?.items ?? []);
  return items.map((it) => ({
    insertText: typeof it.insertText === "string" ? it.insertText : it.insertText.value,
    range: it.range ? {
      start: { line: it.range.start.line, character: it.range.start.character },
      end: { line: it.range.end.line, character: it.range.end.character },
    } : undefined,
    command: it.command
      ? { title: it.command.title, command: it.command.command, arguments: it.command.arguments }
      : undefined,
  }));
}

function clientOptions(): LanguageClientOptions {
  let lastItems: vscode.InlineCompletionItem[] = [];
  return {
    documentSelector: [{ scheme: "file" }, { scheme: "untitled" }],
    outputChannel: output,
    initializationOptions: serverOptions(readSettings()),
    middleware: {
      provideInlineCompletionItems: async (document, position, context, token, next) => {
        const uri = client!.code2ProtocolConverter.asUri(document.uri);
        const pos = { line: position.line, character: position.character };
        const selected = context.selectedCompletionInfo?.text;
        const known = tracker.lookup(uri, document.version, pos, selected);
        const own = ownRetrigger;
        ownRetrigger = false;
        const invoked = context.triggerKind === vscode.InlineCompletionTriggerKind.Invoke;
        if (known && lastItems.length > 0 && answerFromTracker(known, invoked, own)) {
          // Same document state as the shown suggestion: its refined text, then the other candidates.
          const r = known.range;
          const range = r ? new vscode.Range(r.start.line, r.start.character, r.end.line, r.end.character)
            : new vscode.Range(position, position);
          return [known.text, ...known.others].map(
            (text, i) => new vscode.InlineCompletionItem(text, range, lastItems[Math.min(i, lastItems.length - 1)].command));
        }
        const result = await next(document, position, context, token);
        const items = toLspItems(result);
        tracker.remember(uri, document.version, pos, items, selected);
        lastItems = Array.isArray(result) ? result : (result?.items ?? []);
        return result;
      },
      workspace: {
        // The server pulls section "llada": answer with its option names, not VS Code's.
        configuration: (params, token, next) => {
          if (params.items.some((i) => i.section === "llada")) {
            return params.items.map((i) => (i.section === "llada" ? serverOptions(readSettings()) : null));
          }
          return next(params, token);
        },
      },
    },
  };
}

// -- next-edit suggestions ------------------------------------------------------------------
function uriOf(doc: vscode.TextDocument): string | undefined {
  return client?.code2ProtocolConverter.asUri(doc.uri);
}

function editorOf(uri: string): vscode.TextEditor | undefined {
  return vscode.window.visibleTextEditors.find((e) => uriOf(e.document) === uri);
}

const toRange = (r: { start: { line: number; character: number }; end: { line: number; character: number } }): vscode.Range =>
  new vscode.Range(r.start.line, r.start.character, r.end.line, r.end.character);

function renderNextEdits(uri: string, decorations: NextEditDecoration[]): void {
  const editor = editorOf(uri);
  if (editor) {
    editor.setDecorations(oldTextDecoration, decorations.map((d) => ({ range: toRange(d.range), hoverMessage: d.hover })));
    editor.setDecorations(newTextDecoration, decorations.map((d) => ({
      range: new vscode.Range(toRange(d.range).end, toRange(d.range).end),
      renderOptions: { after: { contentText: d.after } },
    })));
    editor.setDecorations(labelDecoration, decorations.map((d) => {
      const end = editor.document.lineAt(d.range.end.line).range.end;
      return { range: new vscode.Range(end, end), renderOptions: { after: { contentText: `  ${d.label}` } } };
    }));
  }
  const active = vscode.window.activeTextEditor;
  if (active && uriOf(active.document) === uri) {
    void vscode.commands.executeCommand("setContext", "llada.nextEditVisible", decorations.length > 0);
  }
}

function makeNextEdits(): NextEditController {
  return new NextEditController({
    send: (params) => client ? client.sendRequest<NextEditResult>(NEXT_EDIT_METHOD, params) : Promise.reject(new Error("no client")),
    version: (uri) => vscode.workspace.textDocuments.find((d) => uriOf(d) === uri)?.version,
    cursor: (uri) => {
      const e = vscode.window.activeTextEditor;
      return e && uriOf(e.document) === uri ? { line: e.selection.active.line, character: e.selection.active.character } : undefined;
    },
    render: renderNextEdits,
    enabled: () => nextEditServer && readSettings().nextEdit.enabled,
    log: (m) => output.appendLine(m),
  }, readSettings().nextEdit.debounceMs);
}

function onEdit(e: vscode.TextDocumentChangeEvent): void {
  const uri = uriOf(e.document);
  if (!uri || e.contentChanges.length === 0 || vscode.window.activeTextEditor?.document !== e.document) {
    return;
  }
  // the lines the change touched, as the document is now
  const first = Math.min(...e.contentChanges.map((c) => c.range.start.line));
  const last = Math.max(...e.contentChanges.map((c) => c.range.start.line + c.text.split("\n").length - 1));
  nextEdits.changed(uri, { start: { line: first, character: 0 }, end: { line: last, character: 0 } });
}

function jumpToNextEdit(): void {
  const editor = vscode.window.activeTextEditor;
  const uri = editor && uriOf(editor.document);
  const at = uri && nextEdits.jump(uri, editor.selection.active);
  if (editor && at) {
    const pos = new vscode.Position(at.line, at.character);
    editor.selection = new vscode.Selection(pos, pos);
    editor.revealRange(new vscode.Range(pos, pos), vscode.TextEditorRevealType.InCenterIfOutsideViewport);
  }
}

async function acceptNextEdit(): Promise<void> {
  const editor = vscode.window.activeTextEditor;
  const uri = editor && uriOf(editor.document);
  const edit = uri && nextEdits.accept(uri, editor.selection.active);
  if (editor && edit) {
    await editor.edit((b) => b.replace(toRange(edit.range), edit.newText));
  }
}

async function acceptAllNextEdits(): Promise<void> {
  const editor = vscode.window.activeTextEditor;
  const uri = editor && uriOf(editor.document);
  const edits = uri ? nextEdits.acceptAll(uri) : [];
  if (editor && edits.length > 0) {
    await editor.edit((b) => edits.forEach((e) => b.replace(toRange(e.range), e.newText)));
  }
}

async function start(context: vscode.ExtensionContext): Promise<void> {
  const settings = readSettings();
  client = new LanguageClient("llada", "llada", serverCommand(settings), clientOptions());
  client.onNotification("llada/refine", (p: RefineParams) => {
    if (tracker.refine(p)) {
      scheduleRetrigger(p.uri);
    }
  });
  let name = "llada"; // with the backend when it is not the native engine (llada/status)
  client.onNotification("llada/stats", (s: StatsParams) =>
    setStatus(`$(sparkle) ${formatStats(s).replace(/^llada/, name)}`, describeStats(s)));
  client.onNotification("llada/status", (s: StatusParams) => {
    name = statusName(s);
    nextEditServer = s.state === "ready" && s.nextEdit === true;
    if (s.state === "loading") {
      setStatus(`$(sync~spin) ${name}`, `${name}: ${s.message ?? "loading the model"}`);
    } else if (s.state === "error") {
      setStatus(`$(error) ${name}`, `${name}: ${s.message ?? "engine error"}`);
    } else {
      setStatus(`$(sparkle) ${name}`, `${name}: ready`);
    }
  });
  setStatus("$(sync~spin) llada", "llada: starting the server");
  await client.start();
  context.subscriptions.push({ dispose: () => void client?.stop() });
}

async function restart(context: vscode.ExtensionContext): Promise<void> {
  const old = client;
  client = undefined;
  if (old) {
    await old.stop();
  }
  await start(context);
}

export async function activate(context: vscode.ExtensionContext): Promise<void> {
  output = vscode.window.createOutputChannel("llada", { log: true });
  status = vscode.window.createStatusBarItem(vscode.StatusBarAlignment.Right, 100);
  status.command = "llada.showStats";
  oldTextDecoration = vscode.window.createTextEditorDecorationType({
    backgroundColor: new vscode.ThemeColor("diffEditor.removedTextBackground"),
    textDecoration: "line-through",
  });
  newTextDecoration = vscode.window.createTextEditorDecorationType({
    after: { backgroundColor: new vscode.ThemeColor("diffEditor.insertedTextBackground"), margin: "0 0 0 0.5em" },
  });
  labelDecoration = vscode.window.createTextEditorDecorationType({
    after: { color: new vscode.ThemeColor("editorCodeLens.foreground"), fontStyle: "italic", margin: "0 0 0 1em" },
  });
  nextEdits = makeNextEdits();
  context.subscriptions.push(output, status, oldTextDecoration, newTextDecoration, labelDecoration);
  context.subscriptions.push(
    vscode.commands.registerCommand("llada.restartServer", () => restart(context)),
    vscode.commands.registerCommand("llada.showStats", async () => {
      const info: unknown = client ? await client.sendRequest("llada/debugInfo", {}) : { state: "not running" };
      output.appendLine(JSON.stringify(info, null, 2));
      output.show(true);
    }),
    vscode.commands.registerCommand("llada.toggle", async () => {
      const c = vscode.workspace.getConfiguration("editor");
      await c.update("inlineSuggest.enabled", !c.get<boolean>("inlineSuggest.enabled", true), vscode.ConfigurationTarget.Global);
    }),
    vscode.workspace.onDidChangeConfiguration(async (e) => {
      if (!e.affectsConfiguration("llada") || !client) {
        return;
      }
      nextEdits.debounceMs = readSettings().nextEdit.debounceMs;
      if (e.affectsConfiguration("llada.serverPath") || e.affectsConfiguration("llada.engine") || e.affectsConfiguration("llada.model")) {
        await restart(context);
      } else {
        await client.sendNotification("workspace/didChangeConfiguration", { settings: serverOptions(readSettings()) });
      }
    }),
    vscode.commands.registerCommand("llada.nextEdit.jump", jumpToNextEdit),
    vscode.commands.registerCommand("llada.nextEdit.accept", acceptNextEdit),
    vscode.commands.registerCommand("llada.nextEdit.acceptAll", acceptAllNextEdits),
    vscode.commands.registerCommand("llada.nextEdit.dismiss", () => {
      const editor = vscode.window.activeTextEditor;
      const uri = editor && uriOf(editor.document);
      if (uri) {
        nextEdits.clear(uri);
      }
    }),
    vscode.workspace.onDidChangeTextDocument(onEdit),
    vscode.window.onDidChangeActiveTextEditor((e) => {
      const uri = e && uriOf(e.document);
      nextEdits.switched(uri || undefined);
      void vscode.commands.executeCommand("setContext", "llada.nextEditVisible", !!uri && nextEdits.suggestions(uri).length > 0);
    }),
    vscode.workspace.onDidCloseTextDocument((d) => {
      tracker.forget(d.uri.toString());
      const uri = uriOf(d);
      if (uri) {
        nextEdits.forget(uri);
      }
    }),
    vscode.workspace.onDidGrantWorkspaceTrust(() => restart(context)), // its .venv may now be used
  );
  await start(context);
}

export async function deactivate(): Promise<void> {
  await client?.stop();
}
