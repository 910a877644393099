// Package subprocess is kernelhost's default transport: each kernel is one
// long-lived local interpreter process (python3, bash, node, Rscript or a
// JVM running jshell), started in the
// context's cwd and kept for the context's lifetime, so state persists across
// executions.
//
// # Driver protocol
//
// The interpreter runs a small driver program (drivers/driver.py, driver.sh,
// driver.js, driver.R, Driver.java, embedded in the binary and passed with
// -c/-e, for R in the environment; Java's compiled once into a cache
// directory, see java.go, and python's by a loader given with -c that keeps
// it compiled there, see pycache.go) and talks to the host over two extra
// pipes, leaving fd 1 and 2 to the interpreter:
//
//   - fd 3, requests (host → driver): for python and javascript one JSON line
//     {"msg_id": "...", "code": "...", "silent": false} per request, and for
//     javascript also {"interrupt": "<msg_id>"} and {"sigint": "<msg_id>"}
//     (see Signals); for bash one
//     NUL-terminated record, "0" or "1" (silent) followed by the code; for R
//     and Java (no JSON parser in base R or the JDK) a header line
//     "<silent 0|1> <code bytes> <msg_id>" followed by the code, and for
//     Java also "sigint 0 <msg_id>" (see Signals). A javascript request may also carry
//     "imports", "source_map" or "compile_error" (see TypeScript and ES
//     modules). A pooled python or node interpreter gets {"cwd": "<dir>"}
//     when it is handed out (see Warm pool).
//   - fd 4, messages (driver → host): one JSON core.Message per line. The
//     first line is {"type":"kh_ready"}; a {"cwd"} record is answered by
//     {"type":"kh_cwd"}, with "evalue" when the driver could not enter the
//     directory. A line may also hold a JSON array of
//     messages; an empty line is skipped. For every request the driver
//     writes, in order: status busy and execute_input (not for silent
//     requests) in one write, the outputs, execute_reply, status idle. A
//     message without parent_id (bash sends none) gets the running
//     request's msg_id. Node's console and process.stdout/stderr.write
//     send stream messages here, coalesced (see Output coalescing); the
//     host merges those it reads together.
//   - Python writes the same messages into fd 1 instead, as frames among
//     its prints (frames.go: a mark the host makes for each interpreter
//     and passes in KH_FRAME_MARK, a kind, a length, the JSON lines; each
//     frame one write of at most PIPE_BUF, which no other writer can cut),
//     and holds fd 4 open without writing to it, so the host sees it end.
//     Its print writes to fd 1 in C (see Output coalescing).
//   - fd 1 and 2 carry what is written to them directly: child processes
//     (os.system, subprocess, child_process with stdio inherited), C code,
//     python's print, and all of bash's and R's printed output (print, cat,
//     message, warnings; R writes them unbuffered). The host forwards each
//     read as a stream message of the running request (writes that come
//     faster than the host reads may arrive merged, as Jupyter kernels
//     merge them too); bytes that are not UTF-8 become U+FFFD.
//
// # Output order
//
// These hold for every request:
//
//   - Everything the interpreter itself writes (python: print, sys.stdout,
//     sys.stderr, display, the result, the error; node: console.log/error,
//     process.stdout/stderr.write, the result, the error) arrives in exactly
//     the order it was written, stdout against stderr included: it all goes
//     through one channel (python: fd 1, node: fd 4), as ipykernel sends
//     it all over IOPub. One exception, python: stderr text that does not
//     end a line waits up to a tick for the write that ends it, and a print
//     that user code flushes itself (flush=True) in that time, or 64 KiB of
//     prints, can overtake it.
//   - Output written to fd 1 or 2 before a message on fd 4 arrives before
//     that message, and all of it before execute_reply and idle (e.g.
//     os.system('echo a'); print('b') gives a, then b). The pump, the only
//     reader of fd 4, reads it, then drains what fd 1 and 2 hold (a
//     non-blocking read: a child that exited left its bytes in the pipes),
//     emits that, then emits the fd-4 messages. One lock spans each of its
//     passes and each fd-1/2 reader's read and emission, so nothing read
//     from fd 1/2 is emitted between the pump's read and its emission.
//   - Python: fd 1 is the one ordered channel, so a child's stdout keeps
//     its place among the prints and messages by itself, and the host
//     drains fd 2 before each read of fd 1 it hands on (os.system('echo E
//     >&2'); print('q') gives E, then q). For the other direction (a
//     message, then a child's stderr) an audit hook runs before each child
//     starts (os.system, subprocess, posix_spawn, fork, exec) and waits,
//     bounded, until the host has read fd 1 empty and then an empty frame
//     written after that: the host handles its reads one after another, so
//     by then it has emitted the earlier messages.
//   - Node has no such hook: there the order of a console.log and the output
//     of a child started after it is that of the host's reads, right unless
//     the child writes before the host has read the message (microseconds
//     on an idle host).
//   - Between fd 1 and fd 2 themselves (a child's stdout against its
//     stderr, bash's echo against its >&2) the order is that of the reads:
//     two pipes read by two goroutines cannot keep it. ipykernel has the
//     same limit for fd-level output.
//   - Output of a thread or a background child that writes while the
//     interpreter prints is interleaved in the order the host reads it.
//
// # Output coalescing
//
// The python and node drivers do not send one message per write call: a
// run of writes to one stream leaves as one stream message, so a fast loop
// of prints costs about what printing costs.
//
// Python: print and sys.stdout.write run in C, as in a plain interpreter
// writing to a pipe: sys.stdout is an io.TextIOWrapper over a 64 KiB
// io.BufferedWriter over an io.FileIO on fd 1, and no driver code runs per
// print or per flush. sys.stderr is a TextIOWrapper whose every write
// reaches the driver, which flushes stdout and sends the text as a framed
// message at once (so the two keep their order); text that does not end a
// line waits for the write that ends it, or the next tick, so
// print(x, file=sys.stderr) (two writes) leaves as one message. Output is
// sent before any other message of the driver (display,
// result, error, reply, in order), before a child process starts (the
// audit hook), on flush() and print(flush=True), when the buffer is full,
// at the end of each cell, and about every 2 ms while a cell runs, by a
// flusher thread (a print followed by time.sleep or a long computation
// arrives within milliseconds). The host keeps that time: python gets a
// fifth pipe, the tick pipe (fd 5, named by KH_TICK_FD, which the driver
// unsets), and from 2 ms after the host sent a request until its idle
// arrives the host writes a byte to it every 2 ms (one timer per
// interpreter, re-armed per request; the write is non-blocking and dropped
// when the pipe is full). The flusher thread blocks reading the pipe, GIL
// released, and flushes on each tick, so a cell shorter than 2 ms (1+1)
// costs no wake of it. Without the tick pipe (the driver run by hand or by
// another host) the driver wakes the flusher at each cell's start, which
// then flushes every 2 ms itself: the same guarantees, 10-20 µs more per
// cell. sys.stdout and sys.stderr have .buffer (bytes
// are written as they are, a UTF-8 sequence split between two writes is
// joined, invalid bytes become U+FFFD), fileno() 1 and 2, and encoding
// utf-8; a cell that closes sys.stdout leaves a new one to the cells after
// it. A forked child (os.fork, multiprocessing) has no flusher thread: its
// stdout is flushed at each newline, its stderr sent at each write, the
// rest on os._exit or exit; it does not read the tick pipe (it closes its
// copy). Between cells the flusher sleeps: what a thread prints then waits
// for the driver's next message (at the latest the next request's busy,
// whose request it then joins).
//
// Node: console and process.stdout/stderr.write queue the text; the queue
// is sent before any other message, before a child process starts
// (child_process's spawn and spawnSync), when 64 KiB are pending, and at
// the latest 2 ms after it was written: node's timer sends it while the
// event loop runs (a cell that awaits), and a cell's first write and a
// write after 2 ms without output go out at once, so only the last writes of a fast burst
// followed by synchronous code that never yields wait for that code to
// end.
//
// An interrupt never splits a message or sends output twice. Python's
// SIGINT handler does not raise while the main thread is in the driver's
// output code (messages, stderr); it holds the interrupt, which the next
// output call raises before it takes anything, and sends SIGINT to the
// main thread again every 0.5 ms until it lands in user code. print runs
// no driver code: an interrupt there acts as in a plain interpreter, and
// one that cuts a print waiting for a full pipe (the host a pipe's worth
// behind) drops what that print handed to the buffer, at most 8 KiB. A
// SIGINT that CPython took on another thread, or just before the main
// thread entered a blocking call, is sent to the main thread again by the
// output thread at its next flush (driver.py, _check_lost_sigint).
// Node's breakOnSigint can stop user code inside a
// flush it started (on size or age); the host's SIGINT comes only for code
// that still runs 50 ms after the interrupt record (see Signals), and such
// a flush may then lose the output it carried, at most 2 ms of it.
//
// Output read before its request's busy is held until busy and
// execute_input are out. All three read ends go through Go's netpoller, so
// waiting for the interpreter parks goroutines, not OS threads.
//
// A single round trip without core: start `KH_FRAME_MARK=0000000000000000
// python3 -c "$(cat drivers/driver.py)" 3<requests 4>/dev/null >messages`,
// write the JSON request line to fd 3 and read fd 1 up to the frame with the
// status idle line. BenchmarkRoundTrip in this package does
// exactly that over pipes, alternating with the same request through the
// Kernel, and reports both medians.
//
// # TypeScript and ES modules
//
// typescript runs on driver.js too. The host compiles each typescript cell
// with esbuild's Go API (in-process: no tool beyond node at run time) and
// rewrites the static imports and exports of javascript and typescript cells,
// which a script cannot contain (jscell.go): imports become JS that the
// driver runs first ("imports": import() through node's loader, the names
// bound as globals of the context), export is dropped. The transform's source
// map ("source_map") lets the driver report errors at the cell's own lines; a
// cell esbuild rejects arrives as "compile_error" and fails as a SyntaxError
// at its line. A javascript cell without the words import and export is sent
// as written.
//
// # IPython cell semantics (python)
//
// The python driver runs cells as IPython does where the interpreter can
// import IPython, through IPython's own machinery (one InteractiveShell,
// without ZMQ), loaded only when a cell needs it (docs/RATIONALE.md says
// why): a cell indented as a whole is dedented (with or without IPython);
// a cell that does not compile as Python (`!cmd`, `x = !cmd`, `%magic`,
// `%%cell_magic`, `x?`), or is one unbound name (`pwd`, `ls`: automagic),
// is turned into Python by the shell's input transformers; a trailing ';' hides the result (displayhook.quiet); results
// and display() are formatted by shell.display_formatter once the shell
// exists (builtin scalars by its text/plain formatter alone unless another
// formatter claims their type) and written as display_data by the driver's
// DisplayPublisher; importing matplotlib.pyplot turns on the inline
// backend, so plt.show() writes a display_data with image/png where it is
// called and the post_execute event, after each cell, shows the figures
// still open, then closes them. get_ipython() (a builtin, and IPython's own
// once user code imports IPython) creates the shell: a kernel environment
// registers its formatters on get_ipython().display_formatter, and they
// apply to every result and display after.
//
// The ordering guarantees above hold for all of it: the cell runs through
// the same code, prints, displays and the result go through fd 1, and
// `!cmd`, %pip and %%bash start children, whose output reaches fd 1/2 after
// the prints before them (`!cmd` uses IPython's system_raw, not the pty of
// its default system_piped, so stdout and stderr stay apart). An
// interrupted `!cmd` ends the command; as in IPython, the cell goes on with
// _exit_code -2. An error a magic catches and shows (%time 1/0) or an event
// callback raises is an error message, as ipykernel sends it, and the cell
// goes on. Without IPython, a `!`/`%` line fails with a
// ModuleNotFoundError naming python3-ipython and KERNELHOST_PYTHON. The
// tests run /usr/bin/python3, which has Debian's python3-ipython and
// python3-matplotlib (python3 on PATH may be another interpreter).
//
// # Signals and process groups
//
// Each interpreter leads its own process group (Setpgid) and gets SIGKILL when
// the host dies (Pdeathsig). Interrupt sends SIGINT to the group; the drivers
// ignore it between requests. R cannot ignore it: one that lands while R
// reads fd 3 stays pending, and driver.R drops it once the request is read,
// before the code starts; like bash, R gets SIGINT again while the
// interrupted request still runs (sigintResends). Java's driver handles
// SIGINT (sun.misc.Signal) with JShell.stop() while a cell runs and ignores
// it otherwise; it gets the resends too, for a signal that came just before
// the cell started. The JVM runs that handler on a thread it starts for it,
// late under load, when the next cell may already run; so after each
// SIGINT the host writes "sigint 0 <msg_id>" on fd 3, and the driver starts
// a cell only once the handler has run for each (1 s at most). Python's driver also interrupts a request that
// the signal reached before its code started. Node is different: a SIGINT
// that lands while vm.runInContext (breakOnSigint) swaps node's SIGINT
// handlers kills node, and a request passes through that swap just as its
// synchronous part starts or ends, which is when an interrupt of code that
// awaits or has just started arrives. So for node, Interrupt first writes
// {"interrupt": msg_id} on fd 3, which ends a request that is awaiting or
// has not started, and sends SIGINT only if the request still runs 50 ms
// later: synchronous code (a loop, execSync) by then is deep inside
// runInContext, away from the swap. A SIGINT that still lands as a run
// ends (node was slow to read the record) is kept by node's watchdog and
// would terminate the next run, another request's; so after each SIGINT
// the host writes {"sigint": msg_id} on fd 3, and unless the signal
// terminated a run of that request, the driver takes it with a run of
// its own before the next request starts. Restart and Shutdown SIGKILL the
// interpreter and every descendant, those in sessions of their own too
// (start_new_session, setsid, detached): its cgroup where the machine
// offers one, its process tree otherwise (see reap.go); and wait for it. An
// interpreter that exits on its own (os._exit, bash `exit`, process.exit) is
// reported as status dead with ParentID "", after what it left is killed;
// Restart starts a fresh one.
//
// # Warm pool
//
// Options.PoolSizes keeps interpreters of a language started ahead of need
// (pool.go; the host's -interpreter-pool, default python=1,
// javascript=1): StartKernel and Restart take a ready one, which cuts a
// context's creation to the engine's set-up request. A pooled interpreter
// starts in Options.PoolCwd exactly as a fresh one would and is sent nothing
// before it is handed out, so it carries no state, env or cwd of anyone. A
// python, javascript or typescript kernel in any other existing cwd takes it
// too: on hand-out the transport sends the driver {"cwd": dir} and waits
// for its kh_cwd; the driver chdirs, sets PWD, and re-derives what its start
// took from its directory (node's require() of the cells; python's import
// caches), so the kernel is as one started in dir: os.getcwd() and
// process.cwd(), relative paths, children's cwd, import and require of
// modules and node_modules there. The transport does this itself rather
// than rely on the engine's cwd helper: a transport user other than the
// engine gets the kernel it asked for, and the engine's kernel setup
// request runs before its cwd helper. A cwd that does not exist fails as
// without a pool. bash, R and java kernels take a pooled interpreter only in
// PoolCwd (pool.go says why). Every interpreter, pooled or cold, starts
// with PWD set to its cwd, not the host's. The engine applies a context's
// env vars (and its cwd again) after the hand-out, as after a cold start.
// The pool refills in the background, replaces an interpreter that died
// while it waited, and never makes a start wait longer than a cold one: an
// empty pool means a cold start. Close kills the pooled interpreters;
// PoolStats reports them and their memory (the plugin serves them in the
// host's /metrics).
package subprocess
