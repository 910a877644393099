// Package subprocess is kernelhost's default transport: each kernel is one
// long-lived local interpreter process (python3, bash or node), started in the
// context's cwd and kept for the context's lifetime, so state persists across
// executions.
//
// # Driver protocol
//
// The interpreter runs a small driver program (drivers/driver.py, driver.sh,
// driver.js, embedded in the binary and passed with -c/-e) and talks to the
// host over two extra pipes, leaving fd 1 and 2 to the interpreter:
//
//   - fd 3, requests (host → driver): for python and javascript one JSON line
//     {"msg_id": "...", "code": "...", "silent": false} per request; for bash
//     one NUL-terminated record, "0" or "1" (silent) followed by the code.
//   - fd 4, messages (driver → host): one JSON core.Message per line. The
//     first line is {"type":"kh_ready"}. A line may also hold a JSON array of
//     messages. For every request the driver writes, in order: status busy
//     and execute_input (not for silent requests) in one write, the outputs,
//     execute_reply, status idle. A message without parent_id (bash
//     sends none) gets the running request's msg_id.
//   - fd 1 and 2 carry all stream output: the drivers' print/console.log
//     write there directly, as do os.system and child processes, so one pipe
//     keeps their relative order. The host forwards each read as a stream
//     message of the running request (writes that come faster than the host
//     reads may arrive merged, as Jupyter kernels merge them too).
//
// Ordering across the pipes needs no sentinel. The pump reads fd 4 and,
// every time it has read it, drains fd 1 and 2 before handing on the fd-4
// messages; meanwhile one reader per fd 1/2 forwards output as it comes. A
// lock spans each fd-1/2 read and the emission of what it read, and the
// pump's drain and hand-on, so anything the driver's process tree wrote to
// fd 1/2 before it wrote execute_reply is delivered before the reply and
// idle. Output read before its request's busy is held until busy and
// execute_input are out. Between fd-4 outputs (display_data,
// execute_result) and stream output the order is that of the reads, exact
// except when both are written within the same few microseconds. All three
// read ends go through Go's netpoller, so waiting for the interpreter parks
// goroutines, not OS threads.
//
// A single round trip without core: start `python3 -c "$(cat drivers/driver.py)"
// 3<requests 4>messages`, write the JSON request line to fd 3 and read fd 4
// up to the status idle line. BenchmarkRoundTrip in this package does
// exactly that over pipes, alternating with the same request through the
// Kernel, and reports both medians.
//
// # Signals and process groups
//
// Each interpreter leads its own process group (Setpgid) and gets SIGKILL when
// the host dies (Pdeathsig). Interrupt sends SIGINT to the group; the drivers
// ignore it between requests. Restart and Shutdown SIGKILL the whole group and
// wait for it. An interpreter that exits on its own (os._exit, bash `exit`,
// process.exit) is reported as status dead with ParentID "", after its group
// is killed; Restart starts a fresh one.
package subprocess
