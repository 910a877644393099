// kernelhost subprocess driver for JavaScript (node).
//
// Protocol (see ../doc.go): requests arrive on fd 3 as JSON lines
// {"msg_id", "code", "silent"}; messages leave on fd 4 as JSON lines. Code runs
// in one persistent vm context; the last expression's value is the result
// (a returned Promise is awaited). console.log/error and process.stdout/stderr
// writes go out as stream messages on fd 4 too, so everything this process
// writes keeps its order; child processes write to fd 1/2, which the host
// forwards. The host may also send {"interrupt": msg_id} on fd 3 (see
// onInterrupt).
'use strict';
const fs = require('fs');
const net = require('net');
const vm = require('vm');
const util = require('util');
const Module = require('module');
const path = require('path');

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
// of fd 4, so busy and execute_input must arrive together.
function emit(...msgs) {
  send(Buffer.from(msgs.map((m) => JSON.stringify(m) + '\n').join('')));
}

// writeStream sends chunk (a string or bytes) as one stream message on fd 4,
// at once: the channel of results and errors, so the order holds, stdout
// against stderr included. parent_id '' (a timer firing between requests):
// the host gives it the running request's id, or drops it.
const streamHead = {
  stdout: '{"type":"stream","name":"stdout","parent_id":',
  stderr: '{"type":"stream","name":"stderr","parent_id":',
};
function writeStream(name, chunk) {
  const text = typeof chunk === 'string' ? chunk : Buffer.from(chunk).toString('utf8');
  if (text) send(Buffer.from(streamHead[name] + JSON.stringify(parent) + ',"text":' + JSON.stringify(text) + '}\n'));
}

// A minimal stream for console.Console: each write is sent at once, with
// no buffering and no state, so a script interrupted inside console.log
// (by breakOnSigint) cannot leave it stuck, as a stream.Writable would be.
function streamOf(name) {
  const stream = {
    write(chunk, enc, cb) {
      writeStream(name, chunk);
      if (typeof enc === 'function') enc();
      else if (typeof cb === 'function') cb();
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
const userConsole = new console.Console({ stdout: streamOf('stdout'), stderr: streamOf('stderr') });
// process.stdout/stderr.write too (user code shares the driver's process).
for (const name of ['stdout', 'stderr']) {
  process[name].write = (chunk, enc, cb) => {
    writeStream(name, chunk);
    if (typeof enc === 'function') enc();
    else if (typeof cb === 'function') cb();
    return true;
  };
}

// require() resolves relative to the cwd, as in a REPL.
const userRequire = Module.createRequire(path.join(process.cwd(), '<cell>'));
const sandbox = { console: userConsole, require: userRequire, module: { exports: {} } };
// Copy the host's globals (fetch, Buffer, timers, ...) as descriptors, so
// lazy getters of deprecated or experimental ones are not triggered.
for (const name of Object.getOwnPropertyNames(globalThis)) {
  if (!(name in sandbox) && name !== 'globalThis' && name !== 'global') {
    Object.defineProperty(sandbox, name, Object.getOwnPropertyDescriptor(globalThis, name));
  }
}
const context = vm.createContext(sandbox);
vm.runInContext('globalThis.global = globalThis', context);

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
process.on('SIGINT', () => {
  if (pending) pending.reject(interruptError());
});

function compile(code, filename) {
  const attempts = [
    code,
    // Top-level await: an expression first (its value is the result), then a
    // statement list (no result; its declarations stay local to the cell).
    `(async () => (\n${code}\n))()`,
    `(async () => {\n${code}\n})()`,
  ];
  let firstErr;
  for (let i = 0; i < attempts.length; i++) {
    try {
      return { script: new vm.Script(attempts[i], { filename, lineOffset: i === 0 ? 0 : -1 }), wrapped: i > 0 };
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

function errorFields(e) {
  if (e && typeof e === 'object' && 'stack' in e) {
    const name = e.name || (e.constructor && e.constructor.name) || 'Error';
    // Drop the driver's and node's vm frames: the user sees only their cell.
    const traceback = String(e.stack).split('\n').filter((line) => !isDriverFrame(line));
    return { ename: String(name), evalue: String(e.message ?? ''), traceback };
  }
  return { ename: 'Error', evalue: util.inspect(e), traceback: ['Uncaught ' + util.inspect(e)] };
}

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
  const reply = { type: 'execute_reply', parent_id: msgId, status: 'ok', execution_count: count };
  try {
    if (interrupted === msgId) throw interruptError();
    const { script, wrapped } = compile(req.code || '', `Cell In[${count}]`);
    let value = script.runInContext(context, { breakOnSigint: true, displayErrors: false });
    if (value && typeof value.then === 'function' && (wrapped || /await/.test(req.code || ''))) {
      value = await new Promise((resolve, reject) => {
        pending = { reject };
        value.then(resolve, reject);
      }).finally(() => { pending = null; });
    }
    if (value !== undefined && !silent) {
      const text = typeof value === 'string' ? util.inspect(value) : util.inspect(value, { colors: false });
      emit({ type: 'execute_result', parent_id: msgId, execution_count: count, data: { 'text/plain': text } });
    }
  } catch (e) {
    const f = errorFields(e);
    emit({ type: 'error', parent_id: msgId, ...f });
    Object.assign(reply, { status: 'error' }, f);
  }
  emit(reply);
  emit({ type: 'status', parent_id: msgId, state: 'idle' });
  parent = '';
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
    else queue = queue.then(() => execute(req));
  }
});
reqs.on('end', () => queue.then(() => process.exit(0)));
process.on('unhandledRejection', (e) => {
  userConsole.error('Unhandled rejection:', e);
});
emit({ type: 'kh_ready' });
