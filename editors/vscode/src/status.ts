// What the status bar item says, from every change the extension hears of: the server process
// starting, failing to start or stopping (vscode-languageclient), the engine's state
// (`llada/status`) and each completion's timings (`llada/stats`). Free of the `vscode` module.
import { describeStats, formatStats, statusName, type StatsParams, type StatusParams } from "./core";

export const RESTART_COMMAND = "llada.restartServer";
export const STATS_COMMAND = "llada.showStats";

export interface StatusView {
  text: string;
  tooltip: string;
  command: string; // what a click runs: restart after an error, else the statistics
  error: boolean;
}

type State = "starting" | "loading" | "ready" | "error" | "stopped";

/** The item's state machine; `view()` renders it. */
export class StatusModel {
  private state: State = "starting";
  private name = "llada";
  private message = "";
  private pace = ""; // a ready engine's speed: warming, slow: 3.1 s/step, stuck: <why>
  private stats: StatsParams | undefined;
  private empty: StatsParams | undefined; // the newest answer, when nothing of it was shown
  private command = "llada-lsp";
  private candidate: { completionId: string; index: number; count: number } | undefined;
  private cycled = new Set<string>(); // completion ids of the answers to a cycle (Alt+] / Alt+[)

  /** The extension is starting `command` (a (re)start clears the last error and timings). */
  starting(command: string): StatusView {
    this.state = "starting";
    this.command = command;
    this.message = "";
    this.stats = undefined;
    this.empty = undefined;
    return this.view();
  }

  /** The server process could not be started or died: `reason` as Node or the client gives it
   * (e.g. `spawn llada-lsp ENOENT`). */
  failed(reason: string): StatusView {
    this.state = "error";
    this.message = reason;
    return this.view();
  }

  /** The server process stopped without an error of its own (e.g. it exited). */
  stopped(): StatusView {
    if (this.state !== "error") {
      this.state = "stopped";
      this.message = "the server stopped";
    }
    return this.view();
  }

  onStatus(s: StatusParams): StatusView {
    this.name = statusName(s);
    this.message = s.message ?? "";
    this.pace = s.state === "ready" ? (s.pace ?? "") : "";
    this.state = s.state === "loading" ? "loading" : s.state === "error" ? "error" : "ready";
    if (this.state === "error" && !this.message) {
      this.message = "engine error";
    }
    return this.view();
  }

  /** Cycling shows candidate `index` (1-based) of `count` of completion `completionId`. */
  showCandidate(completionId: string, index: number, count: number): StatusView {
    this.candidate = { completionId, index, count };
    return this.view();
  }

  /** The suggestion cycled through is gone (an edit, another answer). */
  clearCandidate(): StatusView {
    this.candidate = undefined;
    return this.view();
  }

  /** An answer to a cycle: its stats, when it came from the candidates the server had, are no
   * new latency (the last one stays). */
  noteCycled(completionId: string): void {
    if (this.cycled.size > 100) {
      this.cycled.clear();
    }
    this.cycled.add(completionId);
  }

  onStats(s: StatsParams): StatusView {
    if (this.candidate && this.candidate.completionId !== String(s.completionId)) {
      this.candidate = undefined;
    }
    if (this.state === "starting" || this.state === "loading") {
      this.state = "ready"; // an answer came, so the engine is up
    }
    if (this.cycled.has(String(s.completionId)) && s.source !== "engine" && this.stats) {
      return this.view();
    }
    if (s.shown === false) {
      this.empty = s; // nothing was shown: the latency stays the last suggestion's, the tooltip says why
      return this.view();
    }
    this.stats = s;
    this.empty = undefined;
    return this.view();
  }

  /** The tooltip's line for the newest answer when nothing of it was shown (else ""). */
  private emptyNote(): string {
    const e = this.empty;
    return e ? `\nlast request (completion ${e.completionId}): nothing shown, ${e.emptyReason ?? "no suggestion"}` : "";
  }

  view(): StatusView {
    const name = this.name;
    switch (this.state) {
      case "starting":
        return { text: `$(sync~spin) ${name} starting`, tooltip: `${name}: starting ${this.command}`, command: STATS_COMMAND, error: false };
      case "loading":
        return { text: `$(sync~spin) ${name} loading`, tooltip: `${name}: ${this.message || "loading the model"}`, command: STATS_COMMAND, error: false };
      case "error":
      case "stopped":
        return {
          text: `$(error) ${name}: ${shortReason(this.message)}`,
          tooltip: `${name}: ${this.message}\n(server: ${this.command})\nClick to restart the language server.`,
          command: RESTART_COMMAND,
          error: true,
        };
      case "ready":
        if (this.pace) {
          const icon = this.pace === "warming" ? "$(sync~spin)" : this.pace.startsWith("stuck") ? "$(warning)" : "$(watch)";
          return { text: `${icon} ${name} ${this.pace.startsWith("stuck") ? "stuck" : this.pace}`, tooltip: `${name}: ${this.pace}`, command: STATS_COMMAND, error: false };
        }
        if (this.stats) {
          const c = this.candidate && this.candidate.count > 0 ? ` · ${this.candidate.index}/${this.candidate.count}` : "";
          return { text: `$(sparkle) ${formatStats(this.stats).replace(/^llada/, name)}${c}`, tooltip: `${describeStats(this.stats)}${this.emptyNote()}\nClick for the server's counters.`, command: STATS_COMMAND, error: false };
        }
        return { text: `$(sparkle) ${name} ready`, tooltip: `${name}: ready${this.message ? ` (${this.message})` : ""}${this.emptyNote()}`, command: STATS_COMMAND, error: false };
    }
  }
}

/** An error reason short enough for the status bar (the tooltip has all of it): paths
 * shortened to their last part, e.g. `spawn llada-lsp ENOENT`. */
export function shortReason(reason: string): string {
  // the client wraps Node's error: "... failed. Error: spawn /x/llada-lsp ENOENT" -> its cause
  const lines = reason.split("\n").filter((l) => l.trim());
  const cause = lines.map((l) => /\bError: (.+)$/.exec(l)?.[1]).filter((c) => c !== undefined).pop();
  const line = (cause ?? lines[0] ?? "").replace(/(?:[A-Za-z]:)?[\\/][^\s'"]*[\\/]([^\s'"\\/]+)/g, "$1");
  return line.length > 60 ? `${line.slice(0, 57)}...` : line;
}
