#!/usr/bin/env node
// Conformance client for `steward acp`.
//
// Drives a real `steward acp` process with the official ACP TypeScript SDK
// (@agentclientprotocol/sdk, pinned in package.json) over newline-delimited
// JSON-RPC on the child's stdin/stdout, and checks one scenario.
//
// Usage:
//   node conformance.mjs '<argv JSON>' <scenario> [options]
//
//   <argv JSON>  the full command line of the agent as a JSON array, e.g.
//                '["/path/steward","--data-dir","/tmp/d","--script","s.toml","acp"]'
//                (the Rust test controls it; the environment is inherited).
//   <scenario>   turn | cancel | list | permission | crash-start | crash-load |
//                edit | fs | fs-crash-start | resources
//
// Options:
//   --cwd DIR            session directory (session/new, session/load); default: process cwd
//   --cwd2 DIR           second session directory (list); default: --cwd
//   --decision D         permission: "allow" (allow once) or "reject"
//   --session ID         crash-load: the session to load
//   --tool-call-id ID    crash-load: the tool call interrupted by the crash (optional)
//   --prompt TEXT        the prompt to send (crash-load: the prompt sent by crash-start)
//   --expect-text TEXT   crash-load: assistant text that must be replayed (optional)
//   --ready-on WHAT      crash-start: "tool" (a tool is in_progress, the default) or
//                        "text" (the first agent_message_chunk: mid-stream)
//   --expect-continuation TEXT  crash-load: assistant text the continuation streams
//                        after session/load answered (optional)
//   --expect-tool YES    crash-load: "yes" (a tool failed by recovery, the default)
//                        or "no" (the crash came before any tool call)
//   --timeout-ms N       fail the scenario after N ms (default 60000)
//   --file PATH          edit / fs: the file the script edits (absolute);
//                        resources: the file the prompt links to
//   --buffer TEXT        fs: what the client's editor holds for --file
//
// Output: one JSON line per check on stdout,
//   {"scenario":"turn","check":"prompt.stop_reason_end_turn","ok":true}
// (failures carry a "detail"), then a summary line {"scenario":…,"done":true,"ok":…}.
// Exit code 0 when every check passed, 1 otherwise. `crash-start` instead prints
// {"ready":true,"pid":<agent pid>,"session_id":…,"tool_call_id":…} once a tool is
// running and then waits to be killed.
//
// Schema violations fail the run. The SDK validates what it receives with zod, but
// only logs a bad notification (console.error) and answers a bad agent request with
// -32602 without telling the caller, and it does not validate responses at all. So
// every message from the agent is also checked here against the SDK's own zod
// schemas (see `Wire`), including fields the lenient schemas would silently drop,
// and anything the SDK writes to console.error counts as a failure.

import { spawn } from "node:child_process";
import { realpathSync } from "node:fs";
import { Readable, Writable } from "node:stream";
import * as acp from "@agentclientprotocol/sdk";

// The SDK's generated zod validators for stable ACP v1. Not part of the package's
// public exports, so it is imported by path; the SDK version is pinned exactly.
const schemas = await import(
  new URL("./node_modules/@agentclientprotocol/sdk/dist/v1/schema/zod.gen.js", import.meta.url)
);

const RECOVERED_TOOL_ERROR = "Tool execution outcome unknown after server restart";
const RECOVERED_AGENT_TEXTS = [
  "Session execution interrupted by server restart",
  "Provider Step outcome unknown after server restart",
];

// ---------------------------------------------------------------------------
// Reporting

function emit(line) {
  process.stdout.write(JSON.stringify(line) + "\n");
}

class Report {
  constructor(scenario) {
    this.scenario = scenario;
    this.failed = [];
  }

  /** Records one check; prints it; returns whether it passed. */
  check(name, ok, detail) {
    const line = { scenario: this.scenario, check: name, ok: Boolean(ok) };
    if (!ok) {
      this.failed.push(name);
      if (detail !== undefined) line.detail = detail;
    }
    emit(line);
    return Boolean(ok);
  }

  fail(name, detail) {
    return this.check(name, false, detail);
  }

  /** Prints something worth knowing that is not a check. */
  info(name, detail) {
    emit({ scenario: this.scenario, info: name, detail });
  }

  finish() {
    const ok = this.failed.length === 0;
    emit({ scenario: this.scenario, done: true, ok, failed: this.failed });
    return ok;
  }
}

// ---------------------------------------------------------------------------
// Wire tap: sees every message in wire order, validates it, keeps the updates.

/** Schema of each request or notification the agent may send us. */
const AGENT_REQUEST_SCHEMAS = {
  [acp.methods.client.session.requestPermission]: schemas.zRequestPermissionRequest,
  "fs/read_text_file": schemas.zReadTextFileRequest,
  "fs/write_text_file": schemas.zWriteTextFileRequest,
};
const AGENT_NOTIFICATION_SCHEMAS = {
  [acp.methods.client.session.update]: schemas.zSessionNotification,
};
/** Schema of the result of each request we send. */
const RESULT_SCHEMAS = {
  [acp.methods.agent.initialize]: schemas.zInitializeResponse,
  [acp.methods.agent.session.new]: schemas.zNewSessionResponse,
  [acp.methods.agent.session.load]: schemas.zLoadSessionResponse,
  [acp.methods.agent.session.list]: schemas.zListSessionsResponse,
  [acp.methods.agent.session.prompt]: schemas.zPromptResponse,
};

/**
 * Paths of `raw` that the parsed value lost or changed: the SDK's schemas mirror
 * serde's DefaultOnError/VecSkipError and silently drop a malformed optional field
 * (e.g. `"status": "done"`), an unknown field, or a bad array item.
 */
function droppedPaths(raw, parsed, path = "$") {
  if (Array.isArray(raw)) {
    if (!Array.isArray(parsed) || parsed.length !== raw.length) return [path];
    return raw.flatMap((item, i) => droppedPaths(item, parsed[i], `${path}[${i}]`));
  }
  if (raw !== null && typeof raw === "object") {
    if (parsed === null || typeof parsed !== "object") return [path];
    return Object.keys(raw).flatMap((key) =>
      parsed[key] === undefined && raw[key] !== undefined
        ? [`${path}.${key}`]
        : droppedPaths(raw[key], parsed[key], `${path}.${key}`),
    );
  }
  return Object.is(raw, parsed) ? [] : [path];
}

/** Keys that select the variant of a tagged union in ACP. */
const TAG_KEYS = new Set(["sessionUpdate", "type", "outcome"]);

/**
 * zod issues as "path: message" lines. For a tagged union, only the variants whose
 * tag matched are described, not why every other variant did not.
 */
function summarizeIssues(issues, prefix = []) {
  return issues.flatMap((issue) => {
    const path = [...prefix, ...issue.path];
    if (issue.code === "invalid_union" && Array.isArray(issue.errors)) {
      const tagMatched = issue.errors.filter(
        (branch) => !branch.some((i) => i.code === "invalid_value" && i.path.length === 1 && TAG_KEYS.has(i.path[0])),
      );
      if (tagMatched.length > 0 && tagMatched.length < issue.errors.length) {
        return tagMatched.flatMap((branch) => summarizeIssues(branch, path));
      }
    }
    return [`${path.join(".") || "$"}: ${issue.message}`];
  });
}

class Wire {
  constructor(report) {
    this.report = report;
    this.seq = 0; // position of each incoming message in wire order
    this.validated = 0;
    this.pending = new Map(); // id of our request -> method
    this.responses = []; // { seq, method, error? }
    this.updates = []; // { seq, sessionId, update }
    this.permissionRequests = []; // { seq, params }
    this.fsRequests = []; // { seq, method, params }
    this.waiters = [];
    this.closed = false;
  }

  /** A message we send. */
  outgoing(message) {
    if ("id" in message && "method" in message) this.pending.set(message.id, message.method);
  }

  /** A message the agent sent, already JSON-parsed by ndJsonStream. */
  incoming(message) {
    const seq = ++this.seq;
    if (message.jsonrpc !== "2.0") this.report.fail("wire.jsonrpc_version", message);
    if ("method" in message) {
      const isRequest = "id" in message;
      const schema = (isRequest ? AGENT_REQUEST_SCHEMAS : AGENT_NOTIFICATION_SCHEMAS)[message.method];
      if (!schema) {
        this.report.fail(`wire.unexpected_${isRequest ? "request" : "notification"}`, message.method);
      } else {
        this.validate(schema, message.params, message.method);
        // Kept even when invalid, so the scenario's checks see what was sent.
        const params = isObject(message.params) ? message.params : {};
        if (isRequest && message.method.startsWith("fs/")) this.fsRequests.push({ seq, method: message.method, params });
        else if (isRequest) this.permissionRequests.push({ seq, params });
        else if (isObject(params.update)) this.updates.push({ seq, sessionId: params.sessionId, update: params.update });
      }
    } else {
      const method = this.pending.get(message.id);
      this.pending.delete(message.id);
      if (method === undefined) {
        this.report.fail("wire.response_to_unknown_id", message);
      } else if ("error" in message) {
        this.validate(schemas.zError, message.error, `${method} error`);
        this.responses.push({ seq, method, error: message.error });
      } else {
        this.validate(RESULT_SCHEMAS[method], message.result, `${method} result`);
        this.responses.push({ seq, method });
      }
    }
    this.wake();
  }

  /** Checks `value` against `schema`; prints only failures (one line per message). */
  validate(schema, value, what) {
    this.validated++;
    if (!schema) return this.report.fail("schema.no_schema", what);
    const result = schema.safeParse(value);
    if (!result.success) {
      return this.report.fail("schema.violation", { message: what, issues: summarizeIssues(result.error.issues), value });
    }
    const dropped = droppedPaths(value, result.data);
    if (dropped.length > 0) {
      return this.report.fail("schema.field_dropped", { message: what, paths: dropped, value });
    }
    return true;
  }

  /** Wire position of the latest response to `method`. */
  lastResponseSeq(method) {
    const found = this.responses.filter((r) => r.method === method).at(-1);
    return found ? found.seq : Infinity;
  }

  /** Updates of one session, optionally only those in the wire range (after, before). */
  sessionUpdates(sessionId, after = 0, before = Infinity) {
    return this.updates.filter((u) => u.sessionId === sessionId && u.seq > after && u.seq < before);
  }

  /** Resolves with the first update matching `predicate` (past or future). */
  waitForUpdate(predicate, what) {
    return new Promise((resolve, reject) => {
      const waiter = () => {
        const found = this.updates.find(predicate);
        if (found) return resolve(found), true;
        if (this.closed) return reject(new Error(`agent output ended before ${what}`)), true;
        return false;
      };
      if (!waiter()) this.waiters.push(waiter);
    });
  }

  wake() {
    this.waiters = this.waiters.filter((waiter) => !waiter());
  }

  close() {
    this.closed = true;
    this.wake();
  }
}

/** Passes the agent's stdout through unchanged, failing on any line that is not a JSON object. */
function jsonLinesGuard(report) {
  const decoder = new TextDecoder();
  let buffer = "";
  const checkLine = (line) => {
    if (line.trim() === "") return;
    let value;
    try {
      value = JSON.parse(line);
    } catch {
      return report.fail("wire.stdout_not_json", line.slice(0, 500));
    }
    if (value === null || typeof value !== "object" || Array.isArray(value)) {
      report.fail("wire.stdout_not_json_object", line.slice(0, 500));
    }
  };
  return new TransformStream({
    transform(chunk, controller) {
      buffer += decoder.decode(chunk, { stream: true });
      for (let i = buffer.indexOf("\n"); i >= 0; i = buffer.indexOf("\n")) {
        checkLine(buffer.slice(0, i));
        buffer = buffer.slice(i + 1);
      }
      controller.enqueue(chunk);
    },
    flush() {
      if (buffer.trim() !== "") report.fail("wire.stdout_unterminated_line", buffer.slice(0, 500));
    },
  });
}

// ---------------------------------------------------------------------------
// The agent process and the SDK client

/** Agents this script started and that are still running (killed on timeout). */
const liveAgents = new Set();

/** Spawns the agent and wraps its stdio in an SDK stream tapped by a `Wire`. */
function startAgent(argv, report) {
  const [bin, ...args] = argv;
  const child = spawn(bin, args, { stdio: ["pipe", "pipe", "inherit"], env: process.env });
  liveAgents.add(child);
  const exited = new Promise((resolve) => {
    child.on("exit", (code, signal) => {
      liveAgents.delete(child);
      resolve({ code, signal });
    });
    child.on("error", (error) => {
      // Failed to spawn (no "exit" follows) or to signal it.
      report.fail("agent.spawn", String(error));
      if (child.pid === undefined) resolve({ code: null, signal: null, error: String(error) });
    });
  });
  child.stdin.on("error", () => {}); // EPIPE once the agent is gone; the scenario reports it

  const wire = new Wire(report);
  const sdkStream = acp.ndJsonStream(
    Writable.toWeb(child.stdin),
    Readable.toWeb(child.stdout).pipeThrough(jsonLinesGuard(report)),
  );
  const writer = sdkStream.writable.getWriter();
  const stream = {
    readable: sdkStream.readable.pipeThrough(
      new TransformStream({
        transform(message, controller) {
          wire.incoming(message);
          controller.enqueue(message);
        },
        flush() {
          wire.close();
        },
      }),
    ),
    writable: new WritableStream({
      write(message) {
        wire.outgoing(message);
        return writer.write(message);
      },
    }),
  };
  return { child, exited, wire, stream };
}

/**
 * The SDK client app. `permission(params)` answers session/request_permission;
 * `counts.updates` counts session/update notifications the SDK accepted and
 * delivered (a rejected one is logged by the SDK and never reaches the handler).
 */
function clientApp(report, permission, counts, files) {
  let app = acp
    .client({ name: "steward-acp-conformance" })
    .onNotification(acp.methods.client.session.update, () => {
      counts.updates++;
    })
    .onRequest(acp.methods.client.session.requestPermission, ({ params }) => {
      counts.permissions++;
      return permission(params);
    });
  if (files) {
    app = app
      .onRequest("fs/read_text_file", ({ params }) => files.read(params))
      .onRequest("fs/write_text_file", ({ params }) => files.write(params));
  }
  return app
    .onRequest("*", ({ method }) => {
      report.fail("agent.unexpected_request", method);
      throw acp.RequestError.methodNotFound(method);
    })
    .onNotification("*", ({ method }) => {
      report.fail("agent.unexpected_notification", method);
    });
}

/** Picks the first option of one of `kinds` (in order of preference). */
function pickOption(options, kinds) {
  for (const kind of kinds) {
    const option = options.find((o) => o.kind === kind);
    if (option) return option;
  }
  return undefined;
}

/** Default permission answer outside the `permission` scenario: allow once, and say so. */
function allowOnce(report) {
  return (params) => {
    report.info("permission.requested", params.toolCall);
    const option = pickOption(params.options, ["allow_once", "allow_always"]);
    if (!option) return { outcome: { outcome: "cancelled" } };
    return { outcome: { outcome: "selected", optionId: option.optionId } };
  };
}

/**
 * Runs `body({ ctx, wire, agent })` against a fresh agent, then closes its stdin
 * and checks it exits cleanly. Returns what `body` returned.
 */
async function withAgent(opts, report, body, permission = allowOnce(report), files = undefined) {
  const agent = startAgent(opts.argv, report);
  const counts = { updates: 0, permissions: 0 };
  const app = clientApp(report, permission, counts, files);
  let result;
  try {
    result = await app.connectWith(agent.stream, async (ctx) => {
      const value = await body({ ctx, wire: agent.wire, agent });
      await sleep(100); // let the SDK finish dispatching what it already received
      report.check("sdk.accepted_every_update", counts.updates === agent.wire.updates.length, {
        on_wire: agent.wire.updates.length,
        delivered_by_sdk: counts.updates,
      });
      report.check("sdk.accepted_every_permission_request", counts.permissions === agent.wire.permissionRequests.length, {
        on_wire: agent.wire.permissionRequests.length,
        delivered_by_sdk: counts.permissions,
      });
      return value;
    });
  } catch (error) {
    const exit = await Promise.race([agent.exited, sleep(500).then(() => "still running")]);
    report.fail("scenario.error", { error: describeError(error), agent_exit: exit });
  }
  report.check("schema.all_messages_valid", !report.failed.some((f) => f.startsWith("schema.")), {
    messages: agent.wire.validated,
  });
  await expectCleanExit(agent, report);
  return result;
}

/** Closes the agent's stdin and expects exit code 0 within 10 s. */
async function expectCleanExit(agent, report) {
  agent.child.stdin.end();
  if (agent.child.pid === undefined) return; // never started
  const exit = await Promise.race([agent.exited, sleep(10_000).then(() => null)]);
  if (exit === null) {
    report.fail("agent.exit_on_stdin_eof", "still running 10 s after stdin was closed");
    agent.child.kill("SIGKILL");
    await agent.exited;
  } else {
    report.check("agent.exit_on_stdin_eof", exit.code === 0, exit);
  }
}

// ---------------------------------------------------------------------------
// Protocol steps shared by the scenarios

async function initialize(ctx, report, fs = false) {
  const response = await ctx.request(acp.methods.agent.initialize, {
    protocolVersion: acp.PROTOCOL_VERSION,
    clientCapabilities: { fs: { readTextFile: fs, writeTextFile: fs }, terminal: false },
    clientInfo: { name: "steward-acp-conformance", version: "0.0.0" },
  });
  const caps = response.agentCapabilities ?? {};
  report.check("initialize.protocol_version", response.protocolVersion === acp.PROTOCOL_VERSION, response.protocolVersion);
  report.check("initialize.load_session", caps.loadSession === true, caps);
  report.check("initialize.session_list", isObject(caps.sessionCapabilities?.list), caps.sessionCapabilities);
  return response;
}

async function newSession(ctx, report, cwd) {
  const response = await ctx.request(acp.methods.agent.session.new, { cwd, mcpServers: [] });
  report.check("session_new.session_id", typeof response.sessionId === "string" && response.sessionId !== "", response);
  return response.sessionId;
}

function prompt(ctx, sessionId, text) {
  return ctx.request(acp.methods.agent.session.prompt, {
    sessionId,
    prompt: [{ type: "text", text }],
  });
}

// ---------------------------------------------------------------------------
// Reading session updates

function textOf(block) {
  return block?.type === "text" ? block.text : "";
}

function chunkText(updates, kind) {
  return updates
    .filter((u) => u.update.sessionUpdate === kind)
    .map((u) => textOf(u.update.content))
    .join("");
}

/**
 * Folds tool_call / tool_call_update into one state per tool call id, as a client
 * would display it: { firstSeq, announced, orphanUpdate, updateCount, statuses, state }
 * (`orphanUpdate`: a tool_call_update came before, or without, its tool_call).
 */
function toolCalls(updates) {
  const calls = new Map();
  for (const { seq, update } of updates) {
    const { sessionUpdate, ...fields } = update;
    if (sessionUpdate !== "tool_call" && sessionUpdate !== "tool_call_update") continue;
    let call = calls.get(fields.toolCallId);
    if (!call) {
      call = { firstSeq: seq, announced: false, orphanUpdate: false, updateCount: 0, statuses: [], state: {} };
      calls.set(fields.toolCallId, call);
    }
    if (sessionUpdate === "tool_call") {
      call.announced = true;
      call.state = { status: "pending", ...fields }; // status defaults to pending
    } else {
      call.updateCount++;
      if (!call.announced) call.orphanUpdate = true;
      for (const [key, value] of Object.entries(fields)) {
        if (value !== undefined && value !== null) call.state[key] = value;
      }
    }
    if (fields.status) call.statuses.push(fields.status);
  }
  return calls;
}

function toolContentText(state) {
  return (state.content ?? [])
    .filter((c) => c.type === "content")
    .map((c) => textOf(c.content))
    .join("\n");
}

/** Every tool call was announced by tool_call, then updated, and ended in `status`. */
function checkToolCallsEnd(report, name, calls, status) {
  report.check(`${name}.tool_call_seen`, calls.size > 0, "no tool_call update");
  for (const [id, call] of calls) {
    report.check(`${name}.tool_call_announced_first`, call.announced && !call.orphanUpdate, { toolCallId: id });
    report.check(`${name}.tool_call_updated`, call.updateCount > 0, { toolCallId: id });
    report.check(`${name}.tool_call_status_${status}`, call.state.status === status, {
      toolCallId: id,
      statuses: call.statuses,
    });
  }
}

// ---------------------------------------------------------------------------
// Scenarios

/** initialize, session/new, prompt "hello": text, a tool call that completes, end_turn. */
async function scenarioTurn(opts, report) {
  await withAgent(opts, report, async ({ ctx, wire }) => {
    await initialize(ctx, report);
    const sessionId = await newSession(ctx, report, opts.cwd);
    const response = await prompt(ctx, sessionId, opts.prompt ?? "hello");
    report.check("prompt.stop_reason_end_turn", response.stopReason === "end_turn", response);

    const end = wire.lastResponseSeq(acp.methods.agent.session.prompt);
    const updates = wire.sessionUpdates(sessionId, 0, end);
    const text = chunkText(updates, "agent_message_chunk");
    report.check("prompt.agent_message_text", text.length > 0, updates.map((u) => u.update.sessionUpdate));
    checkToolCallsEnd(report, "prompt", toolCalls(updates), "completed");

    await sleep(200);
    const late = wire.sessionUpdates(sessionId, end);
    report.check("prompt.no_updates_after_response", late.length === 0, late.map((u) => u.update));
  });
}

/** A slow turn, session/cancel after the first text chunk: stopReason cancelled. */
async function scenarioCancel(opts, report) {
  let cancelled = false;
  // A permission asked for after the cancellation must be answered "cancelled".
  const permission = (params) =>
    cancelled ? { outcome: { outcome: "cancelled" } } : allowOnce(report)(params);
  await withAgent(
    opts,
    report,
    async ({ ctx, wire }) => {
      await initialize(ctx, report);
      const sessionId = await newSession(ctx, report, opts.cwd);
      const turn = prompt(ctx, sessionId, opts.prompt ?? "hello");
      turn.catch(() => {}); // awaited below
      await wire.waitForUpdate(
        (u) => u.sessionId === sessionId && u.update.sessionUpdate === "agent_message_chunk",
        "the first agent_message_chunk",
      );
      cancelled = true;
      await ctx.notify(acp.methods.agent.session.cancel, { sessionId });
      const response = await turn;
      report.check("cancel.stop_reason_cancelled", response.stopReason === "cancelled", response);

      const calls = toolCalls(wire.sessionUpdates(sessionId));
      for (const [id, call] of calls) {
        if (call.state.status === "pending" || call.state.status === "in_progress") {
          report.info("cancel.tool_call_left_open", { toolCallId: id, statuses: call.statuses });
        }
      }
    },
    permission,
  );
}

/** Two sessions, then session/list returns both with their cwd. */
async function scenarioList(opts, report) {
  const cwd2 = opts.cwd2 ?? opts.cwd;
  await withAgent(opts, report, async ({ ctx }) => {
    await initialize(ctx, report);
    const first = await newSession(ctx, report, opts.cwd);
    const second = await newSession(ctx, report, cwd2);
    report.check("list.distinct_session_ids", first !== second, { first, second });

    const all = await listAllSessions(ctx, {});
    const ids = all.map((s) => s.sessionId);
    report.check("list.no_duplicates", new Set(ids).size === ids.length, ids);
    for (const [sessionId, cwd] of [[first, opts.cwd], [second, cwd2]]) {
      const info = all.find((s) => s.sessionId === sessionId);
      report.check("list.contains_session", info !== undefined, { sessionId, listed: ids });
      if (info) report.check("list.session_cwd", samePath(info.cwd, cwd), { sessionId, listed: info.cwd, expected: cwd });
    }

    if (!samePath(opts.cwd, cwd2)) {
      // The optional cwd filter of session/list.
      const filtered = (await listAllSessions(ctx, { cwd: opts.cwd })).map((s) => s.sessionId);
      report.check("list.cwd_filter", filtered.includes(first) && !filtered.includes(second), {
        cwd: opts.cwd,
        listed: filtered,
      });
    }
  });
}

/** session/list, following nextCursor. */
async function listAllSessions(ctx, params) {
  const sessions = [];
  let cursor;
  for (let page = 0; page < 100; page++) {
    const response = await ctx.request(acp.methods.agent.session.list, cursor ? { ...params, cursor } : params);
    sessions.push(...response.sessions);
    cursor = response.nextCursor;
    if (!cursor) break;
  }
  return sessions;
}

/** A tool outside tools.allow: answer allow once or reject; the tool completes or fails. */
async function scenarioPermission(opts, report) {
  const allow = opts.decision === "allow";
  if (!["allow", "reject"].includes(opts.decision)) {
    report.fail("usage.decision", `--decision must be allow or reject, not ${opts.decision}`);
    return;
  }
  const asked = [];
  const permission = (params) => {
    asked.push(params);
    const option = allow
      ? pickOption(params.options, ["allow_once"])
      : pickOption(params.options, ["reject_once", "reject_always"]);
    report.check("permission.options_offered", option !== undefined, params.options);
    if (!option) return { outcome: { outcome: "cancelled" } };
    return { outcome: { outcome: "selected", optionId: option.optionId } };
  };
  await withAgent(
    opts,
    report,
    async ({ ctx, wire }) => {
      await initialize(ctx, report);
      const sessionId = await newSession(ctx, report, opts.cwd);
      const response = await prompt(ctx, sessionId, opts.prompt ?? "hello");
      report.check("permission.stop_reason_end_turn", response.stopReason === "end_turn", response);
      report.check("permission.requested", asked.length > 0, "no session/request_permission");
      if (asked.length === 0) return;

      const request = asked[0];
      const requestSeq = wire.permissionRequests[0]?.seq ?? Infinity;
      report.check("permission.session_id", request.sessionId === sessionId, request.sessionId);
      const id = request.toolCall.toolCallId;
      const updates = wire.sessionUpdates(sessionId, 0, wire.lastResponseSeq(acp.methods.agent.session.prompt));
      const call = toolCalls(updates).get(id);
      report.check("permission.tool_call_announced_before_request", call !== undefined && call.firstSeq < requestSeq, {
        toolCallId: id,
      });
      const expected = allow ? "completed" : "failed";
      report.check(`permission.tool_call_${expected}`, call?.state.status === expected, {
        toolCallId: id,
        statuses: call?.statuses,
      });
    },
    permission,
  );
}

/**
 * Starts a turn whose tool runs slowly; once it is in_progress, prints the ready
 * line and waits to be killed (with the agent) by the Rust test.
 */
async function scenarioCrashStart(opts, report) {
  const agent = startAgent(opts.argv, report);
  const counts = { updates: 0, permissions: 0 };
  const app = clientApp(report, allowOnce(report), counts);
  let ready = false;
  agent.exited.then((exit) => {
    // Expected once the test kills the agent; fatal before we are ready.
    if (!ready) {
      report.fail("crash_start.agent_exited_early", exit);
      process.exit(report.finish() ? 0 : 1);
    }
  });
  const connection = app.connectWith(agent.stream, async (ctx) => {
    await initialize(ctx, report);
    const sessionId = await newSession(ctx, report, opts.cwd);
    prompt(ctx, sessionId, opts.prompt ?? "run the slow command").catch(() => {}); // dies with the agent
    const midStream = opts.readyOn === "text";
    const running = await agent.wire.waitForUpdate(
      (u) =>
        u.sessionId === sessionId &&
        (midStream
          ? u.update.sessionUpdate === "agent_message_chunk"
          : u.update.sessionUpdate === "tool_call_update" && u.update.status === "in_progress"),
      midStream ? "the first agent_message_chunk" : "a tool_call_update with status in_progress",
    );
    ready = report.failed.length === 0;
    if (!ready) {
      process.exit(report.finish() ? 0 : 1);
    }
    clearTimeout(opts.timer);
    emit({ ready: true, pid: agent.child.pid, session_id: sessionId, tool_call_id: running.update.toolCallId ?? null });
    await new Promise(() => {}); // until killed
  });
  connection.catch((error) => {
    if (!ready) {
      report.fail("scenario.error", describeError(error));
      process.exit(report.finish() ? 0 : 1);
    }
  });
  setInterval(() => {}, 1 << 30); // keep waiting even after the agent is killed
  await new Promise(() => {});
}

/**
 * A fresh agent after the crash: session/load replays the prompt, the interrupted
 * assistant, the tool failed by recovery and the recovery message; then a new
 * prompt ends the turn normally.
 */
async function scenarioCrashLoad(opts, report) {
  if (!opts.session) {
    report.fail("usage.session", "--session is required");
    return;
  }
  await withAgent(opts, report, async ({ ctx, wire }) => {
    await initialize(ctx, report);
    const sessionId = opts.session;
    const response = await ctx.request(acp.methods.agent.session.load, {
      sessionId,
      cwd: opts.cwd,
      mcpServers: [],
    });
    report.check("load.response", isObject(response), response);

    const replay = wire.sessionUpdates(sessionId, 0, wire.lastResponseSeq(acp.methods.agent.session.load));
    report.info("load.replayed_kinds", replay.map((u) => u.update.sessionUpdate));

    const userText = chunkText(replay, "user_message_chunk");
    const expectedPrompt = opts.prompt ?? "run the slow command";
    report.check("load.user_message_replayed", userText.includes(expectedPrompt), { userText, expected: expectedPrompt });

    const agentText = chunkText(replay, "agent_message_chunk");
    report.check("load.assistant_text_replayed", agentText.length > 0, agentText);
    if (opts.expectText) {
      report.check("load.assistant_text_matches", agentText.includes(opts.expectText), {
        agentText,
        expected: opts.expectText,
      });
    }
    report.check(
      "load.recovery_message_replayed",
      RECOVERED_AGENT_TEXTS.some((t) => agentText.includes(t)),
      { agentText, expected_one_of: RECOVERED_AGENT_TEXTS },
    );

    const calls = toolCalls(replay);
    const failed = [...calls].filter(
      ([, call]) => call.state.status === "failed" && toolContentText(call.state).includes(RECOVERED_TOOL_ERROR),
    );
    const expectTool = opts.expectTool !== "no";
    report.check("load.tool_failed_by_recovery", expectTool ? failed.length > 0 : failed.length === 0, {
      calls: [...calls].map(([id, call]) => ({ id, status: call.state.status, content: toolContentText(call.state) })),
      expected_text: RECOVERED_TOOL_ERROR,
    });
    if (opts.toolCallId) {
      report.check("load.interrupted_tool_call_is_the_one_failed", failed.some(([id]) => id === opts.toolCallId), {
        expected: opts.toolCallId,
        failed: failed.map(([id]) => id),
      });
    }
    for (const [id, call] of calls) {
      report.check("load.tool_call_announced_first", call.announced && !call.orphanUpdate, { toolCallId: id });
    }
    const firstUser = replay.findIndex((u) => u.update.sessionUpdate === "user_message_chunk");
    const firstTool = replay.findIndex((u) => u.update.sessionUpdate === "tool_call");
    report.check(
      "load.user_message_before_tool_call",
      firstUser >= 0 && (firstTool < 0 ? !expectTool : firstUser < firstTool),
      { firstUser, firstTool },
    );

    if (opts.expectContinuation) {
      // What the agent does after the restart streams to the client that loaded it.
      const loadedAt = wire.lastResponseSeq(acp.methods.agent.session.load);
      const streamed = await wire.waitForUpdate(
        (u) =>
          u.sessionId === sessionId &&
          u.seq > loadedAt &&
          u.update.sessionUpdate === "agent_message_chunk" &&
          chunkText([u], "agent_message_chunk").includes(opts.expectContinuation),
        `the continuation's text ${JSON.stringify(opts.expectContinuation)}`,
      );
      report.check("load.continuation_streamed_after_load", Boolean(streamed), streamed?.update);
    }

    const again = await prompt(ctx, sessionId, "are you still there?");
    report.check("load.prompt_after_load_end_turn", again.stopReason === "end_turn", again);
  });
}

/**
 * An edit through the disk (no `fs` offered): the tool call names the file it
 * touches (locations), and its completion carries the diff.
 */
async function scenarioEdit(opts, report) {
  await withAgent(opts, report, async ({ ctx, wire }) => {
    await initialize(ctx, report);
    const sessionId = await newSession(ctx, report, opts.cwd);
    const response = await prompt(ctx, sessionId, opts.prompt ?? "edit the notes");
    report.check("edit.stop_reason_end_turn", response.stopReason === "end_turn", response);
    const calls = [...toolCalls(wire.sessionUpdates(sessionId)).values()];
    const edit = calls.find((c) => c.state.kind === "edit");
    report.check("edit.tool_call_is_an_edit", edit !== undefined, calls.map((c) => c.state));
    if (!edit) return;
    const locations = edit.state.locations ?? [];
    report.check("edit.locations_name_the_file", locations.some((l) => samePath(l.path, opts.file)), locations);
    report.check("edit.location_has_a_line", locations.some((l) => Number.isInteger(l.line)), locations);
    const diff = (edit.state.content ?? []).find((c) => c.type === "diff");
    report.check("edit.diff_content", diff !== undefined, edit.state.content);
    if (!diff) return;
    report.check("edit.diff_path_absolute", diff.path.startsWith("/") && samePath(diff.path, opts.file), diff.path);
    report.check("edit.diff_old_and_new", diff.oldText?.includes("old line") && diff.newText.includes("new line"), diff);
    report.check("edit.completed", edit.state.status === "completed", edit.statuses);
  });
}

/**
 * With `fs` offered, the agent reads the client's buffer (not the disk) and writes
 * through the client (the disk untouched by Steward).
 */
async function scenarioFs(opts, report) {
  const reads = [];
  const writes = [];
  const files = {
    read: (params) => {
      reads.push(params);
      return { content: opts.buffer };
    },
    write: (params) => {
      writes.push(params);
      return {};
    },
  };
  const asked = [];
  const permission = (params) => {
    asked.push(params);
    return allowOnce(report)(params);
  };
  await withAgent(
    opts,
    report,
    async ({ ctx, wire }) => {
      await initialize(ctx, report, true);
      const sessionId = await newSession(ctx, report, opts.cwd);
      const response = await prompt(ctx, sessionId, opts.prompt ?? "read and edit the notes");
      const shown = asked.flatMap((p) => p.toolCall.content ?? []).find((c) => c.type === "diff");
      report.check(
        "fs.question_shows_the_buffers_diff",
        shown?.oldText?.includes(opts.buffer.split("\n")[0]),
        shown,
      );
      report.check("fs.stop_reason_end_turn", response.stopReason === "end_turn", response);
      report.check("fs.read_through_client", reads.some((r) => samePath(r.path, opts.file) && r.sessionId === sessionId), reads);
      const calls = [...toolCalls(wire.sessionUpdates(sessionId)).values()];
      const read = calls.find((c) => c.state.kind === "read");
      report.check("fs.read_returns_the_buffer", read && toolContentText(read.state).includes(opts.buffer.trim()), read?.state);
      report.check("fs.write_through_client", writes.length === 1 && samePath(writes[0].path, opts.file), writes);
      report.check(
        "fs.write_is_the_buffer_edited",
        writes[0]?.content === opts.buffer.replace("old line", "new line"),
        writes[0]?.content,
      );
      const edit = calls.find((c) => c.state.kind === "edit");
      const diff = (edit?.state.content ?? []).find((c) => c.type === "diff");
      report.check("fs.diff_of_the_buffer", diff?.oldText?.includes("old line") && diff?.newText.includes("new line"), diff);
    },
    permission,
    files,
  );
}

/**
 * With `fs` offered, the write request is never answered: once it arrived, prints
 * the ready line and waits to be killed (with the agent) by the Rust test.
 */
async function scenarioFsCrashStart(opts, report) {
  const agent = startAgent(opts.argv, report);
  const counts = { updates: 0, permissions: 0 };
  let ready = false;
  let session;
  const files = {
    read: () => ({ content: opts.buffer }),
    write: () => {
      if (!ready) {
        ready = true;
        emit({ ready: true, pid: agent.child.pid, session_id: session });
      }
      return new Promise(() => {}); // never answered
    },
  };
  agent.exited.then((exit) => {
    if (!ready) {
      report.fail("fs_crash_start.agent_exited_early", exit);
      process.exit(report.finish() ? 0 : 1);
    }
  });
  const app = clientApp(report, allowOnce(report), counts, files);
  app.connectWith(agent.stream, async (ctx) => {
    await initialize(ctx, report, true);
    session = await newSession(ctx, report, opts.cwd);
    await prompt(ctx, session, opts.prompt ?? "edit the notes").catch(() => {});
  }).catch(() => {});
  await new Promise(() => {}); // killed by the test
}

/**
 * A prompt that mentions a file (resource_link) and carries one (resource,
 * embeddedContext), twice, with a compaction budget small enough that the second
 * prompt compacts: the summary comes as a marked agent_thought_chunk; loaded on a
 * new connection, the prompt replays block by block as it was sent.
 */
async function scenarioResources(opts, report) {
  const blocks = [
    { type: "text", text: opts.prompt ?? "look at these" },
    { type: "resource_link", uri: `file://${opts.file}`, name: "linked.txt" },
    { type: "resource", resource: { uri: `file://${opts.cwd}/pasted.rs`, mimeType: "text/x-rust", text: "fn pasted() {}" } },
  ];
  const sessionId = await withAgent(opts, report, async ({ ctx, wire }) => {
    const init = await initialize(ctx, report);
    report.check(
      "initialize.embedded_context",
      init.agentCapabilities?.promptCapabilities?.embeddedContext === true,
      init.agentCapabilities,
    );
    const sessionId = await newSession(ctx, report, opts.cwd);
    for (const text of ["first", "second"]) {
      const response = await ctx.request(acp.methods.agent.session.prompt, {
        sessionId,
        prompt: [{ ...blocks[0], text: `${blocks[0].text} (${text})` }, ...blocks.slice(1)],
      });
      report.check("resources.stop_reason_end_turn", response.stopReason === "end_turn", response);
    }
    const updates = wire.sessionUpdates(sessionId);
    const summaries = updates.filter(
      (u) => u.update.sessionUpdate === "agent_thought_chunk" && u.update._meta?.steward?.kind === "compaction",
    );
    report.check("resources.compaction_is_a_marked_thought", summaries.length === 1, updates.map((u) => u.update));
    report.check(
      "resources.compaction_not_agent_text",
      !chunkText(updates, "agent_message_chunk").includes("Compacted conversation"),
      chunkText(updates, "agent_message_chunk"),
    );
    return sessionId;
  });
  await withAgent(opts, report, async ({ ctx, wire }) => {
    await initialize(ctx, report);
    await ctx.request(acp.methods.agent.session.load, { sessionId, cwd: opts.cwd, mcpServers: [] });
    const users = wire
      .sessionUpdates(sessionId)
      .filter((u) => u.update.sessionUpdate === "user_message_chunk")
      .map((u) => u.update.content);
    report.check(
      "resources.replayed_block_by_block",
      JSON.stringify(users.map((b) => b.type)) === JSON.stringify(["text", "resource_link", "resource", "text", "resource_link", "resource"]),
      users,
    );
    report.check(
      "resources.link_kept",
      users[1]?.uri === blocks[1].uri && users[1]?.name === "linked.txt",
      users[1],
    );
    report.check("resources.resource_kept", users[2]?.resource?.text === "fn pasted() {}", users[2]);
  });
}

const SCENARIOS = {
  edit: scenarioEdit,
  fs: scenarioFs,
  "fs-crash-start": scenarioFsCrashStart,
  turn: scenarioTurn,
  cancel: scenarioCancel,
  list: scenarioList,
  permission: scenarioPermission,
  "crash-start": scenarioCrashStart,
  "crash-load": scenarioCrashLoad,
  resources: scenarioResources,
};

// ---------------------------------------------------------------------------
// Helpers and entry point

function sleep(ms) {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

function isObject(value) {
  return value !== null && typeof value === "object" && !Array.isArray(value);
}

function samePath(a, b) {
  const real = (p) => {
    try {
      return realpathSync(p);
    } catch {
      return p;
    }
  };
  return typeof a === "string" && typeof b === "string" && real(a) === real(b);
}

function describeError(error) {
  if (error instanceof acp.RequestError) return { code: error.code, message: error.message, data: error.data };
  return String(error?.stack ?? error);
}

function parseArgs(argv) {
  const [argvJson, scenario, ...rest] = argv;
  const opts = { cwd: process.cwd(), timeoutMs: 60_000 };
  try {
    opts.argv = JSON.parse(argvJson ?? "");
  } catch {
    opts.argv = undefined;
  }
  if (!Array.isArray(opts.argv) || opts.argv.length === 0 || !SCENARIOS[scenario]) {
    process.stderr.write(
      `usage: node conformance.mjs '<argv JSON array>' <${Object.keys(SCENARIOS).join("|")}> [options]\n`,
    );
    process.exit(2);
  }
  opts.scenario = scenario;
  const names = {
    "--cwd": "cwd",
    "--cwd2": "cwd2",
    "--decision": "decision",
    "--session": "session",
    "--tool-call-id": "toolCallId",
    "--prompt": "prompt",
    "--expect-text": "expectText",
    "--ready-on": "readyOn",
    "--expect-tool": "expectTool",
    "--expect-continuation": "expectContinuation",
    "--timeout-ms": "timeoutMs",
    "--file": "file",
    "--buffer": "buffer",
  };
  for (let i = 0; i < rest.length; i += 2) {
    const name = names[rest[i]];
    if (!name || rest[i + 1] === undefined) {
      process.stderr.write(`unknown or incomplete option: ${rest[i]}\n`);
      process.exit(2);
    }
    opts[name] = name === "timeoutMs" ? Number(rest[i + 1]) : rest[i + 1];
  }
  return opts;
}

async function main() {
  const opts = parseArgs(process.argv.slice(2));
  const report = new Report(opts.scenario);

  // Anything the SDK logs (a notification it rejected, an invalid message, a
  // response to an unknown request) is a failure.
  const consoleError = console.error.bind(console);
  console.error = (...args) => {
    report.fail("sdk.console_error", args.map((a) => (typeof a === "string" ? a : JSON.stringify(a))).join(" "));
    consoleError(...args);
  };
  process.on("unhandledRejection", (error) => report.fail("scenario.unhandled_rejection", describeError(error)));

  opts.timer = setTimeout(() => {
    report.fail("scenario.timeout", `not finished after ${opts.timeoutMs} ms`);
    report.finish();
    for (const child of liveAgents) child.kill("SIGKILL");
    process.exit(1);
  }, opts.timeoutMs);

  await SCENARIOS[opts.scenario](opts, report);
  clearTimeout(opts.timer);
  process.exit(report.finish() ? 0 : 1);
}

await main();
