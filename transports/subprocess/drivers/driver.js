// kernelhost subprocess driver for JavaScript (node).
//
// Protocol (see docs/drivers.md): requests arrive on fd 3 as JSON lines
// {"msg_id", "code", "silent"}; messages leave on fd 4 as JSON lines. Code runs
// in one persistent vm context; the last expression's value is the result
// (a returned Promise is awaited). console.log/error and process.stdout/stderr
// writes go out as stream messages on fd 4 too, so everything this process
// writes keeps its order; child processes write to fd 1/2, which the host
// forwards. The host may also send {"interrupt": msg_id} on fd 3 (see
// onInterrupt), and {"sigint": msg_id} after a SIGINT (see drainSigint).
//
// The same driver runs typescript: the host compiles each cell to
// javascript (transports/subprocess/jscell.go) and sends, besides the code,
// "imports" (code run first that binds the cell's ES module imports as
// globals), "source_map" (to report errors at the cell's own lines) or
// "compile_error" (the cell did not compile; nothing runs).
'use strict';
const fs = require('fs');
const net = require('net');
const vm = require('vm');
const util = require('util');
const Module = require('module');
const path = require('path');
const { SourceMap } = require('module');

const REQ_FD = 3;
const MSG_FD = 4;
let parent = '';
let count = 0;
let pending = null; // {reject} of the awaited result while one is pending
let interrupted = ''; // msg_id of a request the host interrupted
let midLine = false; // a write to fd 4 did not finish (see send)

// send writes whole JSON lines to fd 4. breakOnSigint can stop a script
// inside a write: a write up to PIPE_BUF is atomic on a pipe, but a longer
// one may leave half a line, which the next message would be glued to.
// midLine notes that, and the next send ends the fragment first, so the
// host loses only the fragment (an empty line if the write did finish).
function send(data) {
  if (midLine) data = Buffer.concat([Buffer.from('\n'), data]);
  midLine = true;
  let off = 0;
  while (off < data.length) {
    try {
      off += fs.writeSync(MSG_FD, data, off);
    } catch (e) {
      if (e.code !== 'EAGAIN') throw e;
    }
  }
  midLine = false;
}

// Several messages go out in one write: the host reads fd 1/2 between reads
// of fd 4, so busy and execute_input must arrive together. The stream
// output not sent yet goes first: everything keeps the order it was
// written in.
function emit(...msgs) {
  const output = takeOutput();
  send(Buffer.from(output + msgs.map((m) => JSON.stringify(m) + '\n').join('')));
  if (output) lastSent = performance.now();
}

// Stream output (console, process.stdout/stderr.write) is coalesced: a
// write joins the run of writes to the same stream, and the runs leave as
// one stream message each, so a loop of console.log costs about what
// printing costs instead of one message and one write each. It is sent
// before any other message (emit), before a child process starts
// (flushBeforeSpawn), when FLUSH_CHARS are pending, and at the latest
// FLUSH_DELAY_MS after it was written: by a timer while the event loop runs
// (a cell that awaits), by the next write otherwise. A write after
// FLUSH_DELAY_MS without output goes out at once, so a console.log followed
// by a long synchronous computation reaches the client at once too (only
// the last writes of a fast burst wait for the computation to end).
const FLUSH_DELAY_MS = 2;
const FLUSH_CHARS = 1 << 16;
const streamHead = {
  stdout: '{"type":"stream","name":"stdout","parent_id":',
  stderr: '{"type":"stream","name":"stderr","parent_id":',
};
let outLines = ''; // finished runs, as JSON lines
let runHead = ''; // the current run: its stream's head, parent_id and texts
let runParent = '';
let runTexts = [];
let outChars = 0;
let outSince = 0; // performance.now() of the oldest pending write
// performance.now() when the last stream output was written to fd 4 (after
// the write: a write that waited for the host must not make the next
// writes look late and go out one by one).
let lastSent = 0;
let flushTimer = null;

function closeRun() {
  if (runTexts.length) {
    outLines += runHead + JSON.stringify(runParent) + ',"text":' + JSON.stringify(runTexts.join('')) + '}\n';
    runTexts = [];
  }
}

// takeOutput returns the pending stream output as JSON lines, and empties it.
function takeOutput() {
  if (!outChars) return '';
  closeRun();
  const lines = outLines;
  outLines = '';
  outChars = 0;
  return lines;
}

function flushOutput() {
  if (flushTimer) {
    clearTimeout(flushTimer);
    flushTimer = null;
  }
  const lines = takeOutput();
  if (lines) {
    send(Buffer.from(lines));
    lastSent = performance.now();
  }
}

// writeStream queues chunk (a string or bytes) as stream output.
// parent_id '' (a timer firing between requests): the host gives it the
// running request's id, or drops it.
function writeStream(name, chunk) {
  const text = typeof chunk === 'string' ? chunk : Buffer.from(chunk).toString('utf8');
  if (!text) return;
  const head = streamHead[name];
  if (head !== runHead || parent !== runParent) {
    closeRun();
    runHead = head;
    runParent = parent;
  }
  runTexts.push(text);
  const now = performance.now();
  if (!outChars) outSince = now;
  outChars += text.length;
  if (outChars >= FLUSH_CHARS || now - outSince >= FLUSH_DELAY_MS || now - lastSent >= FLUSH_DELAY_MS) {
    flushOutput();
  } else if (!flushTimer) {
    flushTimer = setTimeout(flushOutput, FLUSH_DELAY_MS);
  }
}

// A child writes to fd 1/2 itself: what was printed before it starts goes
// out first, so the host reads it before the child's output. Every
// child_process function starts its child through one of these two.
function flushBeforeSpawn(target, name) {
  const spawn = target[name];
  target[name] = function (...args) {
    flushOutput();
    return spawn.apply(this, args);
  };
}
flushBeforeSpawn(require('child_process').ChildProcess.prototype, 'spawn');
try {
  // spawnSync, execSync and execFileSync call this binding's spawn.
  flushBeforeSpawn(process.binding('spawn_sync'), 'spawn');
} catch (e) {
  // A node without it: synchronous children keep the order of the host's reads.
}
process.on('exit', flushOutput);

// A minimal stream for console.Console: each write is queued at once
// (writeStream), with no stream state, so a script interrupted inside console.log
// (by breakOnSigint) cannot leave it stuck, as a stream.Writable would be.
// The write callback gets null, as a Writable's does: Console's callback
// takes anything else for an error and throws and catches a TypeError per
// call looking at the stream's state, a cost every console.log would pay.
function streamOf(name) {
  const stream = {
    write(chunk, enc, cb) {
      writeStream(name, chunk);
      if (typeof enc === 'function') enc(null);
      else if (typeof cb === 'function') cb(null);
      return true;
    },
    once() { return stream; },
    on() { return stream; },
    off() { return stream; },
    removeListener() { return stream; },
    listenerCount() { return 0; },
    isTTY: false,
  };
  return stream;
}
// colorMode false, not 'auto': 'auto' reads process.env per call (no
// colors either way, the streams are no TTYs).
const userConsole = new console.Console({ stdout: streamOf('stdout'), stderr: streamOf('stderr'), colorMode: false });
// process.stdout/stderr.write too (user code shares the driver's process).
for (const name of ['stdout', 'stderr']) {
  process[name].write = (chunk, enc, cb) => {
    writeStream(name, chunk);
    if (typeof enc === 'function') enc(null);
    else if (typeof cb === 'function') cb(null);
    return true;
  };
}

// require() resolves relative to the directory the interpreter started in,
// as in a REPL (enterCwd moves that for a pooled interpreter).
function newUserRequire() {
  return Module.createRequire(path.join(process.cwd(), '<cell>'));
}
const sandbox = { console: userConsole, require: newUserRequire(), module: { exports: {} } };
// Copy the host's globals (fetch, Buffer, timers, ...) as descriptors, so
// lazy getters of deprecated or experimental ones are not triggered.
for (const name of Object.getOwnPropertyNames(globalThis)) {
  if (!(name in sandbox) && name !== 'globalThis' && name !== 'global') {
    Object.defineProperty(sandbox, name, Object.getOwnPropertyDescriptor(globalThis, name));
  }
}
const context = vm.createContext(sandbox);
vm.runInContext('globalThis.global = globalThis', context);

// import() in a cell (and the imports the host rewrote) loads modules as
// the main script would, resolved from the current directory. Node 20
// marks this loader experimental and warns once, into the user's first
// import's output: that one warning is dropped.
const importLoader = vm.constants && vm.constants.USE_MAIN_CONTEXT_DEFAULT_LOADER;
const emitWarning = process.emitWarning;
process.emitWarning = function (warning, ...rest) {
  if (String(warning && warning.message !== undefined ? warning.message : warning).startsWith('vm.USE_MAIN_CONTEXT_DEFAULT_LOADER')) return;
  return emitWarning.call(this, warning, ...rest);
};
function newScript(code, options) {
  return new vm.Script(code, importLoader ? { ...options, importModuleDynamically: importLoader } : options);
}

// Without a listener SIGINT would kill node between requests. During
// synchronous code breakOnSigint interrupts the script instead; while a
// Promise is awaited the interrupt rejects it.
//
// The host interrupts with {"interrupt": msg_id} on fd 3 first, and sends
// SIGINT only if the request still runs a little later (see
// Kernel.Interrupt: a SIGINT as runInContext starts or ends can kill node).
// The record is read whenever the event loop runs: it rejects the await if
// that request is awaiting, and a request that has not started yet ends at
// once when it does. Requests other than msg_id ignore it, so an interrupt
// between requests does nothing.
function onInterrupt(id) {
  if (id && id === parent && pending) pending.reject(interruptError());
  else if (id && id !== parent) interrupted = id;
}
function interruptError() {
  return new Error('Script execution interrupted.');
}
// The listener only keeps node alive: the record has already ended an
// awaiting request, and a signal handled here can be one sent for the
// request before (it is emitted on a later turn of the event loop), so it
// must not end whichever request awaits now.
process.on('SIGINT', () => {});

// A SIGINT that lands in a breakOnSigint run which ends before node's
// watchdog thread takes the signal stays counted in the watchdog's
// semaphore, and terminates the next breakOnSigint run, whichever request
// that is (as nearly every SIGINT sent during a short run does; see
// src/node_watchdog.cc, SigintWatchdogHelper::Stop). So after each SIGINT
// the host sends {"sigint": msg_id} on fd 3, and unless a run of that
// request was terminated by it, drainSigint runs before the next request:
// a breakOnSigint run that waits, terminated at once by a stale signal
// and left alone for SIGINT_DRAIN_MS otherwise (the signal then reached
// the listener above, or node lost it).
const SIGINT_DRAIN_MS = 200;
const drainWait = new Int32Array(new SharedArrayBuffer(4));
const drainContext = vm.createContext({ drainWait });
const drainScript = new vm.Script(`Atomics.wait(drainWait, 0, 0, ${SIGINT_DRAIN_MS})`);
let terminatedId = ''; // the request whose runs SIGINT terminated
let terminations = 0; // how many of them, not yet matched to a {"sigint"} record

function onSigintSent(id) {
  queue = queue.then(() => drainSigint(id));
}
async function drainSigint(id) {
  if (id === terminatedId && terminations > 0) {
    terminations--; // the signal terminated a run of id: it was taken
    return;
  }
  try {
    drainScript.runInContext(drainContext, { breakOnSigint: true });
  } catch (e) {
    // terminated: the stale signal is taken
  }
  // Let the event loop read fd 3 before the next request starts, so an
  // interrupt record for it that came during the wait counts.
  await new Promise(setImmediate);
}
function noteTermination(msgId, e) {
  if (!e || e.code !== 'ERR_SCRIPT_EXECUTION_INTERRUPTED') return;
  if (terminatedId !== msgId) {
    terminatedId = msgId;
    terminations = 0;
  }
  terminations++;
}

function compile(code, filename) {
  const attempts = [
    code,
    // Top-level await: an expression first (its value is the result; a
    // final semicolon, as compiled typescript has, is no obstacle), then a
    // statement list (no result; its declarations stay local to the cell).
    `(async () => (\n${code.replace(/;\s*$/, '')}\n))()`,
    `(async () => {\n${code}\n})()`,
  ];
  let firstErr;
  for (let i = 0; i < attempts.length; i++) {
    try {
      return { script: newScript(attempts[i], { filename, lineOffset: i === 0 ? 0 : -1 }), wrapped: i > 0 };
    } catch (e) {
      if (firstErr === undefined) firstErr = e;
      if (!(e instanceof SyntaxError) || !/await/.test(code)) break;
    }
  }
  throw firstErr;
}

function isDriverFrame(line) {
  return /^\s+at /.test(line) &&
    (line.includes('node:vm') || line.includes('node:internal') || line.includes(__filename) || line.includes('[eval]'));
}

// compileError is the error of a cell the host could not compile, in the
// form V8 gives a SyntaxError: the place, the line, a caret, the message.
function compileError(ce, filename) {
  const e = new SyntaxError(ce.message);
  const text = ce.line_text || '';
  const caret = ' '.repeat(Buffer.from(text).subarray(0, ce.column || 0).toString().length) + '^';
  e.stack = (ce.line ? `${filename}:${ce.line}\n${text}\n${caret}\n\n` : '') + `${ce.name}: ${ce.message}`;
  e.name = ce.name;
  return e;
}

// mapTraceback rewrites the positions in the traceback of a compiled cell
// (filename:line:column, and the line and caret V8 puts before a
// SyntaxError) to the cell as written, through its source map.
function mapTraceback(lines, filename, map) {
  const at = (line, column) => {
    const e = map.findEntry(line - 1, column - 1);
    return e && e.originalLine !== undefined ? e : null;
  };
  const name = filename.replace(/[[\]]/g, '\\$&');
  const frame = new RegExp(name + ':(\\d+):(\\d+)', 'g');
  lines = lines.map((line) => line.replace(frame, (m, l, c) => {
    const e = at(+l, +c);
    return e ? `${filename}:${e.originalLine + 1}:${e.originalColumn + 1}` : m;
  }));
  const head = new RegExp('^' + name + ':(\\d+)$').exec(lines[0]);
  if (head && lines.length > 2 && /^ *\^+$/.test(lines[2])) {
    const e = at(+head[1], lines[2].indexOf('^') + 1);
    const source = map.payload.sourcesContent && map.payload.sourcesContent[0];
    if (e && typeof source === 'string') {
      lines[0] = `${filename}:${e.originalLine + 1}`;
      lines[1] = source.split('\n')[e.originalLine] || '';
      lines[2] = ' '.repeat(e.originalColumn) + '^';
    }
  }
  return lines;
}

function errorFields(e, mapped) {
  if (e && typeof e === 'object' && 'stack' in e) {
    const name = e.name || (e.constructor && e.constructor.name) || 'Error';
    // Drop the driver's and node's vm frames: the user sees only their cell.
    let traceback = String(e.stack).split('\n').filter((line) => !isDriverFrame(line));
    if (mapped) traceback = mapTraceback(traceback, mapped.filename, mapped.map);
    return { ename: String(name), evalue: String(e.message ?? ''), traceback };
  }
  return { ename: 'Error', evalue: util.inspect(e), traceback: ['Uncaught ' + util.inspect(e)] };
}

// The engine's helper requests (cwd, env set and reset: silent, and marked by
// their first line, HELPER_MARK) run in a context of their own, with the
// process.env and process.chdir the driver took at start-up: user code that
// replaced them, or Object, cannot turn an env reset into a no-op that
// reports success.
const HELPER_MARK = '// kernelhost helper\n';
const helperContext = vm.createContext({
  process: { env: process.env, chdir: process.chdir.bind(process) },
});

async function execute(req) {
  const msgId = req.msg_id || '';
  const silent = !!req.silent;
  parent = msgId;
  const opening = [{ type: 'status', parent_id: msgId, state: 'busy' }];
  if (!silent) {
    count++;
    opening.push({ type: 'execute_input', parent_id: msgId, execution_count: count });
  }
  emit(...opening);
  // A cell's first write goes out at once: output the previous cell sent
  // just before is no burst this cell's writes belong to, and a cell that
  // writes and then computes without yielding would otherwise hold it.
  lastSent = 0;
  const reply = { type: 'execute_reply', parent_id: msgId, status: 'ok', execution_count: count };
  const filename = `Cell In[${count}]`;
  let mapped = null; // the source map of the code, once the imports ran
  try {
    if (interrupted === msgId) throw interruptError();
    if (req.compile_error) throw compileError(req.compile_error, filename);
    if (req.imports) {
      const imports = newScript(`(async () => {\n${req.imports}\n})()`, { filename, lineOffset: -1 });
      await settled(imports.runInContext(context, { breakOnSigint: true, displayErrors: false }));
    }
    if (req.source_map) mapped = { filename, map: new SourceMap(JSON.parse(req.source_map)) };
    const helper = silent && (req.code || '').startsWith(HELPER_MARK);
    const { script, wrapped } = compile(req.code || '', filename);
    let value = script.runInContext(helper ? helperContext : context, { breakOnSigint: true, displayErrors: false });
    if (value && typeof value.then === 'function' && (wrapped || /await/.test(req.code || ''))) {
      value = await settled(value);
    }
    if (value !== undefined && !silent) {
      const text = typeof value === 'string' ? util.inspect(value) : util.inspect(value, { colors: false });
      emit({ type: 'execute_result', parent_id: msgId, execution_count: count, data: { 'text/plain': text } });
    }
  } catch (e) {
    noteTermination(msgId, e);
    const f = errorFields(e, mapped);
    emit({ type: 'error', parent_id: msgId, ...f });
    Object.assign(reply, { status: 'error' }, f);
  }
  emit(reply);
  emit({ type: 'status', parent_id: msgId, state: 'idle' });
  parent = '';
}

// A pooled interpreter starts in the pool's directory. The host hands it to
// a context in another by sending {"cwd": dir} on fd 3 before any request
// (../pool.go); the driver answers kh_cwd, with evalue when it could not
// enter dir (an absolute path). Then it is as if started there:
// process.chdir moves import() (node resolves a cell's import() from
// process.cwd() at each call) and child processes; PWD is dir, as the host
// gives a cold start; the cells' require is made anew from dir, as the
// start made it from the directory node started in.
function enterCwd(dir) {
  try {
    process.chdir(dir);
  } catch (e) {
    emit({ type: 'kh_cwd', evalue: String((e && e.message) || e) });
    return;
  }
  process.env.PWD = dir;
  sandbox.require = newUserRequire();
  emit({ type: 'kh_cwd' });
}

// settled awaits promise; an interrupt rejects it at once (see onInterrupt).
function settled(promise) {
  return new Promise((resolve, reject) => {
    pending = { reject };
    promise.then(resolve, reject);
  }).finally(() => { pending = null; });
}

// Requests are run one after another, never overlapping.
let queue = Promise.resolve();
let buf = '';
// A libuv pipe handle, not fs.createReadStream: a pending threadpool read on
// a pipe would keep process.exit() from ever finishing.
const reqs = new net.Socket({ fd: REQ_FD, readable: true, writable: false });
reqs.setEncoding('utf8');
reqs.on('data', (chunk) => {
  buf += chunk;
  let nl;
  while ((nl = buf.indexOf('\n')) >= 0) {
    const line = buf.slice(0, nl);
    buf = buf.slice(nl + 1);
    if (!line) continue;
    const req = JSON.parse(line);
    if ('interrupt' in req) onInterrupt(req.interrupt);
    else if ('sigint' in req) onSigintSent(req.sigint);
    else if ('cwd' in req) queue = queue.then(() => enterCwd(req.cwd));
    else queue = queue.then(() => execute(req));
  }
});
reqs.on('end', () => queue.then(() => process.exit(0)));
process.on('unhandledRejection', (e) => {
  userConsole.error('Unhandled rejection:', e);
});
emit({ type: 'kh_ready' });
