// kernelhost subprocess driver for Java: cells run in a jshell session
// (the jdk.jshell API, Debian default-jdk-headless), in this JVM.
//
// Protocol (see docs/drivers.md): a request on fd 3 is a header line
// "<silent 0|1> <code length in bytes> <msg_id>\n" followed by the code's
// UTF-8 bytes; messages go to fd 4 as JSON lines. System.out and System.err
// are replaced by streams that send each write as a stream message on fd 4,
// so output keeps its order with results and errors; child processes write
// to fd 1/2, which the host forwards.
//
// Snippets run in this JVM (jshell's direct execution, SnippetThreads),
// which starts once (no second JVM for a remote agent: half the start time
// and memory), and an interrupt is JShell.stop(), which interrupts the
// thread running the snippet (and stops it if it does not end). The JVM is
// started with java.util opened to unnamed modules, which the engine's env
// snippets need to write through System.getenv() (see javaEnvBlock in
// core/envvars.go).
//
// A cell may hold several snippets (statements, declarations,
// expressions); they run in order until one fails. The last snippet's value,
// when it is an expression, is the main result: a String as itself, other
// values as jshell shows them.
import java.io.BufferedInputStream;
import java.io.ByteArrayOutputStream;
import java.io.FileOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.io.PrintStream;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.stream.Collectors;

import jdk.jshell.Diag;
import jdk.jshell.EvalException;
import jdk.jshell.JShell;
import jdk.jshell.Snippet;
import jdk.jshell.SnippetEvent;
import jdk.jshell.SourceCodeAnalysis;
import jdk.jshell.UnresolvedReferenceException;
import jdk.jshell.VarSnippet;
import jdk.jshell.execution.DirectExecutionControl;
import jdk.jshell.spi.ExecutionControl;
import jdk.jshell.spi.ExecutionControlProvider;
import jdk.jshell.spi.ExecutionEnv;
import sun.misc.Signal;

public class Driver {
    static final String HELPER_MARK = "// kernelhost helper\n";
    // The property a cell's String value is handed over in (same JVM).
    static final String VALUE_PROPERTY = "kernelhost.value";

    static OutputStream msgOut;
    static volatile String parent = "";
    // running is true while a cell runs. It changes only under runLock, and
    // the SIGINT handler stops the cell under it: a signal handled as a
    // cell ends either stops that cell or nothing, never the next one
    // (JShell.stop() stops whatever snippet runs when it gets there).
    static final Object runLock = new Object();
    static boolean running;
    static volatile boolean interrupted;
    // The JVM runs a signal handler on a thread it starts for it, late under
    // load: after the cell the signal was sent for, and as the next one
    // runs, which it would then stop. So the host writes a record
    // "sigint 0 <msg_id>" after each SIGINT it sends, and a cell starts only
    // once the handler has run for each (awaitSignals). Both counts under
    // runLock.
    static long signalsSent;
    static long signalsHandled;
    static final long SIGNAL_WAIT_MS = 1000;
    static JShell shell;
    static int count;

    public static void main(String[] args) throws Exception {
        msgOut = new FileOutputStream("/dev/fd/4");
        InputStream reqIn = new BufferedInputStream(new java.io.FileInputStream("/dev/fd/3"));
        System.setOut(new PrintStream(new StreamOut("stdout"), true, StandardCharsets.UTF_8));
        System.setErr(new PrintStream(new StreamOut("stderr"), true, StandardCharsets.UTF_8));
        shell = JShell.builder().executionEngine(new ExecutionControlProvider() {
            public String name() {
                return "kernelhost";
            }

            public ExecutionControl generate(ExecutionEnv env, Map<String, String> parameters) {
                return new SnippetThreads();
            }
        }, Map.of()).build();
        // An interrupt stops the running cell; between cells there is
        // nothing to stop.
        Signal.handle(new Signal("INT"), sig -> {
            synchronized (runLock) {
                if (running) {
                    interrupted = true;
                    shell.stop();
                }
                signalsHandled++;
                runLock.notifyAll();
            }
        });
        shell.eval("0"); // compile once now: the first cell is then fast
        emit("{\"type\":\"kh_ready\"}");
        while (true) {
            String header = readLine(reqIn);
            if (header == null) {
                System.exit(0); // fd 3 closed: the host is done with us
            }
            String[] parts = header.split(" ", 3);
            if (parts[0].equals("sigint")) {
                synchronized (runLock) {
                    signalsSent++;
                }
                continue;
            }
            int n = Integer.parseInt(parts[1]);
            byte[] code = reqIn.readNBytes(n);
            execute(parts[2], new String(code, StandardCharsets.UTF_8), parts[0].equals("1"));
        }
    }

    // SnippetThreads runs each snippet on a thread of its own and stops only
    // that thread. jshell's "local" engine stops every thread of the
    // snippet's thread group, which holds the threads the cell started too
    // (a pool's worker stopped in its queue's take dies with
    // IllegalMonitorStateException), and waits for every thread of the group
    // before the snippet ends, so a cell whose pool worker started in time
    // never ended.
    static final class SnippetThreads extends DirectExecutionControl {
        private final Object lock = new Object();
        private Thread running; // the snippet's thread, while it runs
        private boolean stopped; // stop() stopped it
        static final long STOP_GRACE_MS = 200;

        @Override
        protected String invoke(Method doit) throws Exception {
            Object[] value = new Object[1];
            Throwable[] thrown = new Throwable[1];
            Thread t = new Thread(() -> {
                try {
                    value[0] = doit.invoke(null);
                } catch (Throwable e) {
                    thrown[0] = e;
                }
            }, "kernelhost-snippet");
            synchronized (lock) {
                running = t;
                stopped = false;
            }
            t.start();
            boolean wasStopped;
            try {
                t.join();
            } finally {
                synchronized (lock) {
                    running = null;
                    wasStopped = stopped;
                }
            }
            Throwable e = thrown[0];
            if (wasStopped || e instanceof ThreadDeath || (e instanceof InvocationTargetException && e.getCause() instanceof ThreadDeath)) {
                throw new ExecutionControl.StoppedException();
            }
            if (e instanceof Exception) {
                throw (Exception) e; // the snippet's own exception is an InvocationTargetException's cause
            }
            if (e != null) {
                throw new InvocationTargetException(e);
            }
            return valueString(value[0]);
        }

        // stop interrupts the snippet's thread, and stops it only if it
        // has not ended STOP_GRACE_MS later. A thread stopped where it
        // waits inside the JDK (a process's start or waitFor, a lock's
        // queue) can leave a lock the JVM shares broken, which breaks
        // later cells (IllegalMonitorStateException); an interrupt ends
        // every such wait cleanly, so Thread.stop is left for code that
        // ignores interrupts, such as a loop that never waits.
        @Override
        public void stop() {
            Thread t;
            synchronized (lock) {
                if (running == null) {
                    return;
                }
                t = running;
                stopped = true;
            }
            t.interrupt();
            Thread stopper = new Thread(() -> forceStop(t), "kernelhost-stop");
            stopper.setDaemon(true);
            stopper.start();
        }

        @SuppressWarnings({"deprecation", "removal"})
        private static void forceStop(Thread t) {
            try {
                t.join(STOP_GRACE_MS);
            } catch (InterruptedException e) {
                return;
            }
            if (!t.isAlive()) {
                return;
            }
            try {
                t.stop(); // a thread is never reused: only this snippet's
            } catch (UnsupportedOperationException e) {
                // Java 20 and later: the interrupt is all there is.
            }
        }
    }

    // awaitSignals waits, bounded, until the handler has run for every
    // SIGINT the host sent, so that none it handles later stops this cell.
    // One it never runs for (the kernel merges a signal sent while another
    // is pending) is given up after SIGNAL_WAIT_MS. Called with runLock held.
    static void awaitSignals() {
        long deadline = System.nanoTime() + SIGNAL_WAIT_MS * 1_000_000;
        while (signalsHandled < signalsSent) {
            long left = (deadline - System.nanoTime()) / 1_000_000;
            if (left <= 0) {
                signalsHandled = signalsSent;
                return;
            }
            try {
                runLock.wait(left);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                return;
            }
        }
    }

    static String readLine(InputStream in) throws IOException {
        ByteArrayOutputStream b = new ByteArrayOutputStream();
        for (int c; (c = in.read()) != '\n'; ) {
            if (c < 0) {
                return null;
            }
            b.write(c);
        }
        return b.toString(StandardCharsets.UTF_8);
    }

    static void execute(String msgID, String code, boolean silent) throws IOException {
        if (code.startsWith(HELPER_MARK)) {
            // The engine's helpers (cwd, env): silent, whatever was asked.
            silent = true;
        }
        parent = msgID;
        String p = "\"parent_id\":" + quote(msgID);
        if (silent) {
            emit("{\"type\":\"status\"," + p + ",\"state\":\"busy\"}");
        } else {
            count++;
            emit("[{\"type\":\"status\"," + p + ",\"state\":\"busy\"},{\"type\":\"execute_input\"," + p + ",\"execution_count\":" + count + "}]");
        }
        String[] err = null; // ename, evalue, traceback (JSON array)
        String value = null;
        synchronized (runLock) {
            awaitSignals();
            interrupted = false;
            running = true;
        }
        try {
            SourceCodeAnalysis sca = shell.sourceCodeAnalysis();
            String rest = code;
            while (err == null && !rest.isBlank()) {
                SourceCodeAnalysis.CompletionInfo ci = sca.analyzeCompletion(rest);
                String src;
                if (ci.completeness().isComplete()) {
                    src = ci.source();
                    rest = ci.remaining();
                } else if (ci.completeness() == SourceCodeAnalysis.Completeness.EMPTY) {
                    break;
                } else {
                    src = rest; // incomplete: let jshell say what is wrong
                    rest = "";
                }
                value = null;
                for (SnippetEvent ev : shell.eval(src)) {
                    if (ev.causeSnippet() != null) {
                        continue; // an update of another snippet
                    }
                    if (interrupted) {
                        err = new String[] {"KeyboardInterrupt", "interrupted", "[\"KeyboardInterrupt: interrupted\"]"};
                        break;
                    }
                    if (ev.status() == Snippet.Status.REJECTED) {
                        err = compileError(ev.snippet());
                        break;
                    }
                    if (ev.exception() != null) {
                        err = runtimeError(ev.exception());
                        break;
                    }
                    value = valueOf(ev);
                }
            }
        } catch (RuntimeException e) {
            err = new String[] {e.getClass().getName(), String.valueOf(e.getMessage()), "[" + quote(e.toString()) + "]"};
        } finally {
            synchronized (runLock) {
                running = false;
            }
            System.out.flush();
            System.err.flush();
        }
        if (interrupted && err == null) {
            err = new String[] {"KeyboardInterrupt", "interrupted", "[\"KeyboardInterrupt: interrupted\"]"};
        }
        List<String> closing = new ArrayList<>();
        if (err == null && value != null && !silent) {
            closing.add("{\"type\":\"execute_result\"," + p + ",\"execution_count\":" + count + ",\"data\":{\"text/plain\":" + quote(value) + "}}");
        }
        String errFields = err == null ? "" : ",\"ename\":" + quote(err[0]) + ",\"evalue\":" + quote(err[1]) + ",\"traceback\":" + err[2];
        if (err != null) {
            closing.add("{\"type\":\"error\"," + p + errFields + "}");
        }
        closing.add("{\"type\":\"execute_reply\"," + p + ",\"status\":\"" + (err == null ? "ok" : "error") + "\",\"execution_count\":" + count + errFields + "}");
        closing.add("{\"type\":\"status\"," + p + ",\"state\":\"idle\"}");
        emit("[" + String.join(",", closing) + "]");
        parent = "";
    }

    // valueOf is the text of an expression snippet's value, null for
    // declarations, statements and void or null values.
    static String valueOf(SnippetEvent ev) {
        Snippet s = ev.snippet();
        boolean expression = s.kind() == Snippet.Kind.EXPRESSION
                || (s.subKind() == Snippet.SubKind.TEMP_VAR_EXPRESSION_SUBKIND);
        if (!expression || ev.value() == null || ev.value().equals("null")) {
            return null;
        }
        String type = s instanceof VarSnippet ? ((VarSnippet) s).typeName() : ((jdk.jshell.ExpressionSnippet) s).typeName();
        if (type.equals("String") || type.equals("java.lang.String")) {
            // jshell shows a String as a Java literal; the value itself is
            // what a notebook shows. Same JVM: hand it over in a property.
            String name = s instanceof VarSnippet ? ((VarSnippet) s).name() : ((jdk.jshell.ExpressionSnippet) s).name();
            shell.eval("System.setProperty(\"" + VALUE_PROPERTY + "\", " + name + ");");
            String v = System.clearProperty(VALUE_PROPERTY);
            if (v != null) {
                return v;
            }
        }
        return ev.value();
    }

    static String[] compileError(Snippet s) {
        List<String> msgs = shell.diagnostics(s).map(d -> d.getMessage(Locale.ROOT)).collect(Collectors.toList());
        String value = msgs.isEmpty() ? "the snippet was rejected" : String.join("\n", msgs);
        List<String> tb = new ArrayList<>();
        for (Diag d : shell.diagnostics(s).collect(Collectors.toList())) {
            tb.add(quote(d.getMessage(Locale.ROOT)));
        }
        tb.add(quote(s.source().strip()));
        return new String[] {"CompilationException", value, "[" + String.join(",", tb) + "]"};
    }

    static String[] runtimeError(Exception e) {
        String name = e instanceof EvalException ? ((EvalException) e).getExceptionClassName() : e.getClass().getName();
        if (e instanceof UnresolvedReferenceException) {
            name = "UnresolvedReferenceException";
        }
        String message = e.getMessage() == null ? "" : e.getMessage();
        List<String> tb = new ArrayList<>();
        tb.add(quote(message.isEmpty() ? name : name + ": " + message));
        for (StackTraceElement f : e.getStackTrace()) {
            tb.add(quote("\tat " + f));
        }
        return new String[] {name, message, "[" + String.join(",", tb) + "]"};
    }

    // emit writes one line to fd 4 in one write.
    static synchronized void emit(String line) {
        try {
            msgOut.write((line + "\n").getBytes(StandardCharsets.UTF_8));
            msgOut.flush();
        } catch (IOException e) {
            System.exit(1); // the host is gone
        }
    }

    static String quote(String s) {
        StringBuilder b = new StringBuilder(s.length() + 2).append('"');
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            switch (c) {
                case '"': b.append("\\\""); break;
                case '\\': b.append("\\\\"); break;
                case '\n': b.append("\\n"); break;
                case '\r': b.append("\\r"); break;
                case '\t': b.append("\\t"); break;
                default:
                    if (c < 0x20 || c == 0x2028 || c == 0x2029 || Character.isSurrogate(c) && !validSurrogate(s, i)) {
                        b.append(String.format("\\u%04x", (int) c));
                    } else {
                        b.append(c);
                    }
            }
        }
        return b.append('"').toString();
    }

    static boolean validSurrogate(String s, int i) {
        char c = s.charAt(i);
        if (Character.isHighSurrogate(c)) {
            return i + 1 < s.length() && Character.isLowSurrogate(s.charAt(i + 1));
        }
        return i > 0 && Character.isHighSurrogate(s.charAt(i - 1));
    }

    // StreamOut sends what user code prints as stream messages at once: a
    // PrintStream hands each print to write(byte[]) (it does not buffer
    // over an OutputStream), which sends it. Single bytes (write(int)) wait
    // for the next write or flush; so do the bytes of an incomplete UTF-8
    // sequence.
    static final class StreamOut extends OutputStream {
        final String head;
        final ByteArrayOutputStream buf = new ByteArrayOutputStream();

        StreamOut(String name) {
            head = "{\"type\":\"stream\",\"name\":\"" + name + "\",\"parent_id\":";
        }

        @Override
        public synchronized void write(int b) {
            buf.write(b);
        }

        @Override
        public synchronized void write(byte[] b, int off, int len) {
            buf.write(b, off, len);
            flush();
        }

        @Override
        public synchronized void flush() {
            byte[] b = buf.toByteArray();
            int end = completeUTF8(b);
            if (end == 0) {
                return;
            }
            buf.reset();
            buf.write(b, end, b.length - end);
            String text = new String(b, 0, end, StandardCharsets.UTF_8);
            emit(head + quote(parent) + ",\"text\":" + quote(text) + "}");
        }

        // completeUTF8 is the length of b without a trailing incomplete sequence.
        static int completeUTF8(byte[] b) {
            for (int i = 1; i <= 3 && i <= b.length; i++) {
                int c = b[b.length - i] & 0xff;
                if (c < 0x80) {
                    return b.length;
                }
                if (c >= 0xc0) {
                    int need = c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : 2;
                    return need > i ? b.length - i : b.length;
                }
            }
            return b.length;
        }
    }
}
