// Next-edit suggestions (docs/lsp.md "Next-edit suggestions"), free of the `vscode` module so
// that node's test runner drives it against the real server (test/nextEdit.test.ts): after
// edits, once they stop for the debounce, `llada/nextEdit` is sent; the answer (the follow-up
// sites of one edit: a rename's uses, a changed function's calls) becomes one reviewable set of
// decorations (the old text struck out, the new text after it, "next edit k/N · kind" at each
// site's line end): jump through it, accept one or all, dismiss. Any edit clears it, and so
// does switching to another editor. A suggestion with a placeholder (an added parameter's name
// at a call, for the user to type over) has that part drawn apart; accepting that one
// suggestion selects the placeholder in the document (typing replaces it), accepting all
// leaves every placeholder as plain text.
import type { LspPosition, LspRange, LspTextEdit } from "./core";

export const NEXT_EDIT_METHOD = "llada/nextEdit";

/** A span of a suggestion's `newText`, in UTF-16 code units (the encoding the extension negotiates). */
export interface Placeholder {
  start: number;
  end: number;
}

/** One suggestion of a `llada/nextEdit` answer. */
export interface NextEditSuggestion {
  range: LspRange;
  newText: string;
  oldText: string;
  confidence: number;
  line: number;
  source?: string; // "analysis" (the edit decides the text), "model" (a masked fill) or "placeholder"
  placeholder?: Placeholder; // the part of newText the user is to type over
}

/** The answer: the document version it applies to, and why it is empty when it is. */
export interface NextEditResult {
  version: number | null;
  suggestions: NextEditSuggestion[];
  reason?: string;
  kind?: string; // the edit's kind: rename, param_added, param_removed, param_reordered
  detail?: string;
}

export interface NextEditParams {
  textDocument: { uri: string; version: number };
  position: LspPosition;
  range?: LspRange;
}

/** How a suggestion is drawn: the old text's range (struck out; empty for an insertion) and
 * the text shown after it (the new text, "⏎" marking each line break); with a placeholder,
 * that text in three parts: before it, the placeholder, after it. */
export interface NextEditDecoration {
  range: LspRange;
  after: string;
  hover: string;
  label: string; // the site's place in the set, drawn apart from the text ("next edit 2/3 · rename")
  placeholder?: { before: string; text: string; after: string };
}

/** The text as drawn on one line: "⏎" for each line break, none for a final one. */
const drawn = (t: string): string => t.split("\n").join(" ⏎ ");

/** The suggestion's placeholder when it is a span of its newText (else none: a plain suggestion). */
export function placeholderOf(s: NextEditSuggestion): Placeholder | undefined {
  const p = s.placeholder;
  const ok = !!p && Number.isInteger(p.start) && Number.isInteger(p.end) && p.start >= 0 && p.start <= p.end
    && p.end <= s.newText.length;
  return ok ? p : undefined;
}

/** Where text `t` inserted at `at` ends. */
function advance(at: LspPosition, t: string): LspPosition {
  const lines = t.split("\n");
  return lines.length === 1 ? { line: at.line, character: at.character + t.length }
    : { line: at.line + lines.length - 1, character: lines[lines.length - 1].length };
}

/** The document range the placeholder covers once the suggestion is applied. */
export function placeholderRange(s: NextEditSuggestion): LspRange | undefined {
  const p = placeholderOf(s);
  if (!p) {
    return undefined;
  }
  const start = advance(s.range.start, s.newText.slice(0, p.start));
  return { start, end: advance(start, s.newText.slice(p.start, p.end)) };
}

export function decorationOf(s: NextEditSuggestion, k = 1, n = 1, kind = ""): NextEditDecoration {
  const label = `next edit ${k}/${n}${kind ? ` · ${kind}` : ""}`;
  const p = placeholderOf(s);
  const text = s.newText.replace(/\n$/, "");
  const d: NextEditDecoration = {
    range: s.range,
    after: drawn(text),
    hover: `llada ${label} (${s.source ?? "model"}, confidence ${s.confidence.toFixed(2)}):\n- ${JSON.stringify(s.oldText)}\n+ ${JSON.stringify(s.newText)}`,
    label,
  };
  if (p) {
    const name = s.newText.slice(p.start, p.end);
    d.placeholder = { before: drawn(text.slice(0, p.start)), text: drawn(name), after: drawn(text.slice(Math.min(p.end, text.length))) };
    d.hover += `\nAccept it, then type over ${JSON.stringify(name)}.`;
  }
  return d;
}

function before(a: LspPosition, b: LspPosition): boolean {
  return a.line < b.line || (a.line === b.line && a.character < b.character);
}

/** The suggestions from the cursor's line on, then those before it (wrapping). */
export function fromCursor(suggestions: readonly NextEditSuggestion[], cursor: LspPosition): NextEditSuggestion[] {
  const here = (s: NextEditSuggestion): boolean => s.range.start.line <= cursor.line && cursor.line <= s.range.end.line;
  const after = suggestions.filter((s) => here(s) || s.range.start.line > cursor.line);
  return [...after, ...suggestions.filter((s) => !after.includes(s))];
}

/** Where the jump goes: the first suggestion that starts off the cursor's line (else the only one). */
export function jumpTarget(suggestions: readonly NextEditSuggestion[], cursor: LspPosition): NextEditSuggestion | undefined {
  const order = fromCursor(suggestions, cursor);
  return order.find((s) => s.range.start.line !== cursor.line) ?? order[0];
}

/** What the accept applies: the suggestion on the cursor's line, else the next one. */
export function acceptTarget(suggestions: readonly NextEditSuggestion[], cursor: LspPosition): NextEditSuggestion | undefined {
  return fromCursor(suggestions, cursor)[0];
}

export function sortSuggestions(s: readonly NextEditSuggestion[]): NextEditSuggestion[] {
  return [...s].sort((a, b) => (before(a.range.start, b.range.start) ? -1 : before(b.range.start, a.range.start) ? 1 : 0));
}

/** A timer API (the global one by default; tests may pass their own). */
export interface Timers {
  set(fn: () => void, ms: number): unknown;
  clear(handle: unknown): void;
}

const GLOBAL_TIMERS: Timers = {
  set: (fn, ms) => setTimeout(fn, ms),
  clear: (h) => clearTimeout(h as ReturnType<typeof setTimeout>),
};

/** What the controller needs from the editor. */
export interface NextEditHost {
  /** Send `llada/nextEdit`; rejects on an error answer. */
  send(params: NextEditParams): Promise<NextEditResult>;
  /** The document's current version (undefined once closed). */
  version(uri: string): number | undefined;
  /** The cursor in the document (when the debounce ends: where the user stopped). */
  cursor(uri: string): LspPosition | undefined;
  /** Show `decorations` in the document (an empty list hides them). */
  render(uri: string, decorations: NextEditDecoration[]): void;
  /** The server can answer (`llada/status` `nextEdit`) and the user has it on. */
  enabled(): boolean;
  log?(message: string): void;
}

interface Shown {
  version: number;
  suggestions: NextEditSuggestion[];
}

/**
 * Per document: a debounce timer after edits, the newest request (older answers are dropped),
 * and the suggestions shown. An edit clears what is shown at once.
 */
export class NextEditController {
  private readonly timers = new Map<string, unknown>();
  private readonly generation = new Map<string, number>();
  private readonly shown = new Map<string, Shown>();
  /** The latest answer per document (for the status line and tests). */
  readonly answers = new Map<string, NextEditResult>();

  constructor(private readonly host: NextEditHost, public debounceMs = 300, private readonly clock: Timers = GLOBAL_TIMERS) {}

  /** The document changed (`edited`: the range, when known): hide, then ask after the debounce. */
  changed(uri: string, edited?: LspRange): void {
    this.clear(uri);
    this.cancelTimer(uri);
    if (!this.host.enabled()) {
      return;
    }
    this.timers.set(uri, this.clock.set(() => {
      this.timers.delete(uri);
      void this.request(uri, edited);
    }, this.debounceMs));
  }

  /** Ask now; resolves to the answer shown (undefined when superseded, stale or failed). */
  async request(uri: string, edited?: LspRange): Promise<NextEditResult | undefined> {
    const version = this.host.version(uri);
    const cursor = this.host.cursor(uri);
    if (version === undefined || cursor === undefined) {
      return undefined;
    }
    const gen = (this.generation.get(uri) ?? 0) + 1;
    this.generation.set(uri, gen);
    let res: NextEditResult;
    try {
      res = await this.host.send({ textDocument: { uri, version }, position: cursor, ...(edited ? { range: edited } : {}) });
    } catch (e) {
      this.host.log?.(`llada/nextEdit failed: ${String(e)}`);
      return undefined;
    }
    this.answers.set(uri, res);
    if (this.generation.get(uri) !== gen || this.host.version(uri) !== version || (res.version ?? version) !== version) {
      return undefined; // a newer request, or an edit since: its answer (or the next) is the one to show
    }
    const suggestions = sortSuggestions(res.suggestions ?? []);
    if (suggestions.length > 0) {
      this.shown.set(uri, { version, suggestions });
    } else {
      this.shown.delete(uri);
    }
    this.host.render(uri, suggestions.map((s, k) => decorationOf(s, k + 1, suggestions.length, res.kind ?? "")));
    return res;
  }

  /** The suggestions shown in the document at its current version. */
  suggestions(uri: string): NextEditSuggestion[] {
    const s = this.shown.get(uri);
    return s && s.version === this.host.version(uri) ? s.suggestions : [];
  }

  /** Where the jump key moves the cursor, if anywhere. */
  jump(uri: string, cursor: LspPosition): LspPosition | undefined {
    return jumpTarget(this.suggestions(uri), cursor)?.range.start;
  }

  /** The edit the accept key applies, and with a placeholder the range to select once it is
   * applied (what is shown is cleared: the edit asks again). */
  accept(uri: string, cursor: LspPosition): (LspTextEdit & { select?: LspRange }) | undefined {
    const target = acceptTarget(this.suggestions(uri), cursor);
    if (!target) {
      return undefined;
    }
    this.clear(uri);
    const select = placeholderRange(target);
    return { range: target.range, newText: target.newText, ...(select ? { select } : {}) };
  }

  /** Every edit of the set (the editor applies them as one edit; placeholders stay as text);
   * what is shown is cleared. */
  acceptAll(uri: string): LspTextEdit[] {
    const all = this.suggestions(uri);
    if (all.length > 0) {
      this.clear(uri);
    }
    return all.map((s) => ({ range: s.range, newText: s.newText }));
  }

  /** Another document became the active one: the others' sets would go stale unseen. */
  switched(active: string | undefined): void {
    for (const uri of [...this.shown.keys(), ...this.timers.keys()]) {
      if (uri !== active) {
        this.clear(uri);
        this.cancelTimer(uri);
      }
    }
  }

  /** Hide the document's suggestions (until the next edit). */
  clear(uri: string): void {
    if (this.shown.delete(uri)) {
      this.host.render(uri, []);
    }
  }

  forget(uri: string): void {
    this.clear(uri);
    this.cancelTimer(uri);
    this.generation.delete(uri);
    this.answers.delete(uri);
  }

  /** Whether a request is waiting for its debounce. */
  pending(uri: string): boolean {
    return this.timers.has(uri);
  }

  private cancelTimer(uri: string): void {
    const t = this.timers.get(uri);
    if (t !== undefined) {
      this.clock.clear(t);
      this.timers.delete(uri);
    }
  }
}
