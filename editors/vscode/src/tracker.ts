// Which inline suggestion is shown per document and its newest text (kept current by
// `llada/refine`), and how VS Code's own state was last filled, which decides how a refinement
// reaches the screen (extension.ts). Free of the `vscode` module, like ./core.
import {
  applyEdits,
  completionIdOf,
  insertTextOf,
  type LspInlineItem,
  type LspPosition,
  type LspRange,
  type RefineParams,
} from "./core";

/** The suggestion shown for a document, kept current by `llada/refine`. */
export interface Shown {
  completionId: string;
  uri: string;
  version: number;
  position: LspPosition;
  text: string;
  step: number;
  final: boolean;
  /** The other candidates the server answered (items after the first), for cycling. */
  others: string[];
  /** The text of the completion widget's selected item the request carried (LSP 3.18
   * `selectedCompletionInfo`): the suggestion extends it and replaces `range`. */
  selected?: string;
  range?: LspRange;
}

/**
 * Which suggestion is shown per document, and its text after the refinements so far.
 * When a refinement arrives for the shown completion, `refine` returns it so that the editor
 * can re-trigger the inline suggestion; the provider then answers from `lookup` without a new
 * server request (same document version and position).
 */
export class SuggestionTracker {
  private readonly shown = new Map<string, Shown>();
  /** Refinements of completions not answered yet, by completion id: the server sends them
   * right after its answer, and they can reach the extension before the answer has passed
   * through the client. `remember` applies them. The newest few completions only. */
  private readonly early = new Map<string, RefineParams[]>();

  /** VS Code's inline suggestion state per document: the document state and the kind of the
   * provider call whose answer it took last. */
  private readonly answered = new Map<string, { version: number; position: LspPosition; explicit: boolean }>();

  remember(uri: string, version: number, position: LspPosition, items: readonly LspInlineItem[],
    selected?: string): Shown | undefined {
    const item = items[0];
    const id = item ? completionIdOf(item) : undefined;
    if (!item || id === undefined) {
      this.shown.delete(uri);
      return undefined;
    }
    const s: Shown = {
      completionId: id, uri, version, position, text: insertTextOf(item), step: -1, final: false,
      others: items.slice(1).map(insertTextOf), selected, range: item.range,
    };
    this.shown.set(uri, s);
    for (const p of this.early.get(id) ?? []) {
      this.refine(p);
    }
    this.early.delete(id);
    return s;
  }

  /** Apply a refinement; returns the updated suggestion when it changed the shown one. */
  refine(p: RefineParams): Shown | undefined {
    const s = this.shown.get(p.uri);
    if (!s || s.completionId !== String(p.completionId)) {
      const id = String(p.completionId);
      this.early.set(id, [...(this.early.get(id) ?? []), p]);
      for (const old of this.early.keys()) {
        if (this.early.size <= 8) {
          break;
        }
        this.early.delete(old);
      }
      return undefined;
    }
    if (p.step < s.step) {
      return undefined;
    }
    let text = applyEdits(s.text, p.edits ?? []);
    if (typeof p.text === "string" && text !== p.text) {
      text = p.text; // the full text wins over edits that do not reproduce it
    }
    const changed = text !== s.text;
    s.text = text;
    s.step = p.step;
    s.final = p.final;
    return changed ? s : undefined;
  }

  /** The shown suggestion if the document is still where it was requested, with the same
   * completion widget item selected (or none, both times). */
  lookup(uri: string, version: number, position: LspPosition, selected?: string): Shown | undefined {
    const s = this.shown.get(uri);
    if (!s || s.version !== version || s.position.line !== position.line || s.position.character !== position.character
      || s.selected !== selected) {
      return undefined;
    }
    return s;
  }

  get(uri: string): Shown | undefined {
    return this.shown.get(uri);
  }

  forget(uri: string): void {
    this.shown.delete(uri);
    this.answered.delete(uri);
  }

  /** The provider answered a call of this kind at this document state (VS Code takes it). */
  noteAnswer(uri: string, version: number, position: LspPosition, explicit: boolean): void {
    this.answered.set(uri, { version, position, explicit });
  }

  /**
   * Whether an explicit trigger alone brings the shown suggestion's newer text with the old one
   * kept on screen until then. VS Code 1.100 refetches on an explicit trigger only while the
   * suggestion it shows came from an automatic request at the same document state (explicit
   * answers "satisfy" every later request there: inlineCompletionsSource.ts `UpdateRequest.satisfies`);
   * otherwise the shown suggestion has to be hidden first, which blanks the screen until the
   * provider's answer.
   */
  replacesInPlace(uri: string): boolean {
    const a = this.answered.get(uri);
    const s = this.shown.get(uri);
    return a !== undefined && s !== undefined && !a.explicit && a.version === s.version
      && a.position.line === s.position.line && a.position.character === s.position.character;
  }
}

/**
 * Whether the provider answers from the tracked suggestion instead of asking the server:
 * the extension's own re-trigger after a refinement, or an automatic request at the same
 * document state. A request the user invoked (e.g. to cycle through suggestions) goes to the
 * server, which then decodes and returns every candidate, unless the tracked one has them.
 */
export function answerFromTracker(known: Shown | undefined, invoked: boolean, ownRetrigger: boolean): boolean {
  return known !== undefined && (ownRetrigger || !invoked || known.others.length > 0);
}

/**
 * How long a refinement waits for the engine's final text while VS Code can still replace the
 * shown suggestion in place (once per automatic request: SuggestionTracker.replacesInPlace).
 * Chosen from the engine's timings: on a CPU the medians of the first suggestion and the final
 * refinement are 19-49 ms apart (BENCHMARKS.md "Alternatives", `bench/lsp_latency.py --mode
 * quality`), so a few times that covers the common case and keeps a slow engine's progress visible.
 */
export const FINAL_HOLD_MS = 200;

/** Timers as node and the extension host have them (a test passes its own). */
export interface Timers {
  set(fn: () => void, ms: number): unknown;
  clear(handle: unknown): void;
}

const NODE_TIMERS: Timers = {
  set: (fn, ms) => setTimeout(fn, ms),
  clear: (h) => clearTimeout(h as ReturnType<typeof setTimeout>),
};

/**
 * Decides when a refinement reaches the screen. VS Code replaces the shown suggestion in place
 * (no blank frame) only once per automatic request, so while that one replacement is left, a
 * refinement that is not the engine's last is held, and the final text spends it; if no final
 * text comes within `holdMs`, the newest text is shown then. Otherwise (the in-place replacement
 * spent, or the final text) a refinement is shown at once. `show(uri, completionId)` re-shows
 * the suggestion (extension.ts reshow); it is called once per held run of refinements.
 */
export class RefineHold {
  private readonly held = new Map<string, { completionId: string; handle: unknown }>();

  constructor(private readonly show: (uri: string, completionId: string) => void,
    private readonly holdMs = FINAL_HOLD_MS, private readonly timers: Timers = NODE_TIMERS) {}

  /** A refinement of the shown suggestion `s` was applied (`changed`: its text changed);
   * `inPlace`: VS Code would replace the shown text in place now. */
  refined(s: Shown, changed: boolean, inPlace: boolean): void {
    const h = this.held.get(s.uri);
    const mine = h !== undefined && h.completionId === s.completionId;
    if (!s.final && inPlace) {
      if (changed && !mine) {
        this.forget(s.uri); // another suggestion's
        const handle = this.timers.set(() => {
          this.held.delete(s.uri);
          this.show(s.uri, s.completionId);
        }, this.holdMs);
        this.held.set(s.uri, { completionId: s.completionId, handle });
      }
      return; // held (a held one keeps its timer)
    }
    this.forget(s.uri);
    if (changed || mine) {
      this.show(s.uri, s.completionId);
    }
  }

  /** Whether a refinement of the document's suggestion waits to be shown. */
  holding(uri: string): boolean {
    return this.held.has(uri);
  }

  /** Drop the document's held refinement (a new suggestion, or the document closed). */
  forget(uri: string): void {
    const h = this.held.get(uri);
    if (h) {
      this.timers.clear(h.handle);
      this.held.delete(uri);
    }
  }
}
