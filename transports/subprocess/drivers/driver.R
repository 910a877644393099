# kernelhost subprocess driver for R (base R only: r-base-core).
#
# Protocol (see docs/drivers.md): a request on fd 3 is a header line
# "<silent 0|1> <code length in bytes> <msg_id>\n" followed by the code's
# UTF-8 bytes; messages go to fd 4 as JSON lines. R writes print() and cat()
# output to fd 1 and message() and warnings to fd 2 itself, unbuffered; the
# host forwards both and drains them before each fd-4 message it hands on,
# so output comes before the value, plots and reply that follow it.
#
# Each top-level expression of a cell is evaluated in the global environment
# in turn. The last one's value, when visible, is the main result
# (execute_result, text/plain as R prints it: [1] "bar"); an earlier visible
# value is a display_data, as IRkernel sends it. data.frame values carry
# text/html too. Base-graphics plots go to a png device per cell and are sent
# as image/png displays when the cell ends.
#
# Interrupts: the driver runs with interrupts suspended; only user code runs
# with them allowed. A SIGINT that arrives between requests stays pending
# (the read of fd 3 is restarted) and is dropped right after the next
# request is read, before its code starts. The host sends SIGINT again while
# the interrupted request still runs (see sigintResends), which covers a
# signal that landed just before the code started.
local({
  Sys.unsetenv("KH_R_DRIVER") # how the host passed this file (see drivers.go)
  options(warn = 1, bitmapType = "cairo", device = function(...) kh_png())

  req_con <- file("/dev/fd/3", open = "rb", raw = TRUE)
  msg_con <- file("/dev/fd/4", open = "wb", raw = TRUE)
  plot_dir <- tempfile("kh-plots-")
  dir.create(plot_dir)
  count <- 0L
  plot_devs <- integer(0) # the png devices this cell opened

  # --- JSON (output only: requests are not JSON) ---
  json_str <- function(s) {
    s <- enc2utf8(as.character(s))
    bad <- !validUTF8(s)
    s[bad] <- iconv(s[bad], "UTF-8", "UTF-8", sub = "?")
    s <- gsub("\\", "\\\\", s, fixed = TRUE)
    s <- gsub("\"", "\\\"", s, fixed = TRUE)
    s <- gsub("\n", "\\n", s, fixed = TRUE)
    s <- gsub("\r", "\\r", s, fixed = TRUE)
    s <- gsub("\t", "\\t", s, fixed = TRUE)
    m <- gregexpr("[\001-\037\177]", s, perl = TRUE)
    regmatches(s, m) <- lapply(regmatches(s, m), function(ch) {
      sprintf("\\u%04x", vapply(ch, utf8ToInt, 1L))
    })
    paste0("\"", s, "\"")
  }
  # to_json: a named list is an object, an unnamed list or I() an array,
  # a length-one vector a scalar.
  to_json <- function(x) {
    if (is.null(x)) return("null")
    if (is.list(x)) {
      parts <- vapply(x, to_json, "")
      if (is.null(names(x))) return(paste0("[", paste(parts, collapse = ","), "]"))
      return(paste0("{", paste0(json_str(names(x)), ":", parts, collapse = ","), "}"))
    }
    if (inherits(x, "AsIs") || length(x) != 1) return(to_json(as.list(unclass(x))))
    if (is.logical(x)) return(if (isTRUE(x)) "true" else "false")
    if (is.numeric(x)) return(format(x, scientific = FALSE))
    json_str(x)
  }
  emit <- function(...) {
    lines <- vapply(list(...), to_json, "")
    writeBin(charToRaw(paste0(paste0(lines, "\n"), collapse = "")), msg_con)
    flush(msg_con)
  }

  # --- rich output ---
  base64 <- function(r) {
    chars <- c(LETTERS, letters, 0:9, "+", "/")
    pad <- (3L - length(r) %% 3L) %% 3L
    x <- matrix(as.integer(c(r, as.raw(rep(0L, pad)))), nrow = 3L)
    v <- x[1L, ] * 65536L + x[2L, ] * 256L + x[3L, ]
    out <- chars[rbind(v %/% 262144L, v %/% 4096L %% 64L, v %/% 64L %% 64L, v %% 64L) + 1L]
    if (pad > 0L) out[length(out) - seq_len(pad) + 1L] <- "="
    paste(out, collapse = "")
  }
  html_escape <- function(x) {
    x <- gsub("&", "&amp;", x, fixed = TRUE)
    x <- gsub("<", "&lt;", x, fixed = TRUE)
    gsub(">", "&gt;", x, fixed = TRUE)
  }
  html_df <- function(df) {
    cells <- as.matrix(format(df))
    row <- function(name, vals) {
      paste0("<tr><th>", html_escape(name), "</th>", paste0("<td>", html_escape(vals), "</td>", collapse = ""), "</tr>")
    }
    head <- paste0("<thead><tr><th></th>", paste0("<th>", html_escape(names(df)), "</th>", collapse = ""), "</tr></thead>")
    body <- vapply(seq_len(nrow(cells)), function(i) row(rownames(df)[i], cells[i, ]), "")
    paste0("<table class=\"dataframe\">", head, "<tbody>", paste(body, collapse = ""), "</tbody></table>")
  }
  # bundle is the MIME bundle of a value: its printed form, as at top level.
  bundle <- function(value) {
    text <- utils::capture.output(if (isS4(value)) methods::show(value) else print(value))
    data <- list(`text/plain` = paste(text, collapse = "\n"))
    if (is.data.frame(value)) data[["text/html"]] <- html_df(value)
    data
  }
  kh_png <- function() {
    grDevices::png(file.path(plot_dir, sprintf("c%d-d%d-%%03d.png", count, length(plot_devs))), width = 7, height = 7, units = "in", res = 96)
    plot_devs <<- c(plot_devs, grDevices::dev.cur())
  }
  # plot_displays closes this cell's png devices and returns their pages as
  # display_data messages.
  plot_displays <- function(msg_id) {
    for (d in plot_devs) if (d %in% grDevices::dev.list()) grDevices::dev.off(d)
    plot_devs <<- integer(0)
    files <- sort(list.files(plot_dir, full.names = TRUE))
    on.exit(unlink(files))
    lapply(files, function(f) {
      png <- readBin(f, "raw", file.info(f)$size)
      list(type = "display_data", parent_id = msg_id, data = list(`image/png` = base64(png), `text/plain` = "plot without title"))
    })
  }

  # --- requests ---
  read_line <- function() {
    bytes <- raw(0)
    repeat {
      b <- readBin(req_con, "raw", 1L)
      if (length(b) == 0L) return(NULL) # fd 3 closed: the host is done with us
      if (b == as.raw(10L)) return(rawToChar(bytes))
      bytes <- c(bytes, b)
    }
  }
  read_request <- function() {
    header <- read_line()
    if (is.null(header)) return(NULL)
    parts <- regmatches(header, regexec("^([01]) ([0-9]+) (.*)$", header))[[1]]
    n <- as.numeric(parts[3])
    code <- if (n > 0) readBin(req_con, "raw", n) else raw(0)
    code <- rawToChar(code)
    Encoding(code) <- "UTF-8"
    list(silent = parts[2] == "1", msg_id = parts[4], code = code)
  }

  # The engine's helper requests (cwd, env set and restore; see
  # core/envvars.go) start with this line. They run in helper_env, whose
  # parent is base: user code that redefined Sys.setenv or `[[` in the
  # global environment cannot redirect them, and what they keep
  # (.kh_env_saved) stays out of the user's sight. They run as silent
  # requests whatever the host asked (core sends them non-silent on R for
  # IRkernel's sake): no execution count, no execute_input.
  helper_mark <- "# kernelhost helper\n"
  helper_env <- new.env(parent = baseenv())
  # The base functions the helpers call, as they are now: user code can
  # also replace them in base itself (unlockBinding, assignInNamespace).
  for (f in c("Sys.setenv", "Sys.unsetenv", "Sys.getenv", "setwd", "getwd", "dir.exists",
              "do.call", "structure", "list", "get0", "exists", "rm", "local", "names",
              "is.na", "%in%", "[[", "c", "try", "inherits", "cat"))
    assign(f, get(f, envir = baseenv()), envir = helper_env)
  rm(f)

  # run_cell evaluates code in envir (the global environment, or helper_env), one top-level
  # expression at a time, and returns the last one's withVisible(). Earlier
  # visible values go out at once as displays. user_depth is the frame depth
  # user code starts below, for warnings and tracebacks.
  user_depth <- NA_integer_
  run_cell <- function(code, msg_id, silent, envir) {
    exprs <- parse(text = code, keep.source = FALSE, srcfile = NULL)
    last <- list(value = NULL, visible = FALSE)
    for (i in seq_along(exprs)) {
      user_depth <<- sys.nframe() + 3L # withVisible, eval and its frame
      last <- withVisible(eval(exprs[[i]], envir = envir))
      user_depth <<- NA_integer_
      if (last$visible && i < length(exprs) && !silent) {
        emit(list(type = "display_data", parent_id = msg_id, data = bundle(last$value)))
      }
    }
    last
  }
  # user_call is the call a condition names, or NULL when it names the
  # driver's own eval or parse (a top-level stop(), a syntax error), which R
  # at top level would not show either.
  user_call <- function(cond) {
    call <- conditionCall(cond)
    if (is.null(call) || !is.call(call)) return(NULL)
    if (identical(call[[1]], quote(eval)) && identical(call[[2]], quote(exprs[[i]]))) return(NULL)
    if (identical(call[[1]], quote(parse)) && identical(call$text, quote(code))) return(NULL)
    call
  }
  deparse1line <- function(call) paste(deparse(call, nlines = 1L), collapse = "")
  warn <- function(w) {
    call <- user_call(w)
    where <- if (is.null(call)) "" else paste0("In ", deparse1line(call), " : ")
    cat("Warning message:\n", where, conditionMessage(w), "\n", sep = "", file = stderr())
    invokeRestart("muffleWarning")
  }
  # user_calls are the calls of the user's frames when an error is signalled:
  # below run_cell's eval, above the handler (.handleSimpleError and h).
  user_calls <- function() {
    all <- sys.calls()
    if (is.na(user_depth) || length(all) <= user_depth) return(list())
    all[seq.int(user_depth + 1L, length.out = max(0L, length(all) - user_depth - 3L))]
  }
  error_fields <- function(e, calls) {
    msg <- conditionMessage(e)
    call <- user_call(e)
    head <- if (is.null(call)) paste0("Error: ", msg) else paste0("Error in ", deparse1line(call), ": ", msg)
    stack <- vapply(calls, deparse1line, "")
    tb <- c(head, if (length(stack)) paste0(seq_along(stack), ". ", stack))
    list(ename = "ERROR", evalue = msg, traceback = I(tb))
  }

  execute <- function(req) {
    msg_id <- req$msg_id
    envir <- globalenv()
    if (startsWith(req$code, helper_mark)) {
      req$silent <- TRUE
      envir <- helper_env
    }
    if (req$silent) {
      emit(list(type = "status", parent_id = msg_id, state = "busy"))
    } else {
      count <<- count + 1L
      emit(list(type = "status", parent_id = msg_id, state = "busy"),
           list(type = "execute_input", parent_id = msg_id, execution_count = count))
    }
    calls <- list()
    outcome <- tryCatch(
      allowInterrupts(withCallingHandlers(
        list(ok = run_cell(req$code, msg_id, req$silent, envir)),
        warning = warn,
        error = function(e) calls <<- user_calls()
      )),
      interrupt = function(i) list(err = list(ename = "KeyboardInterrupt", evalue = "interrupted", traceback = I("KeyboardInterrupt: interrupted"))),
      error = function(e) list(err = error_fields(e, calls))
    )
    closing <- plot_displays(msg_id)
    if (!req$silent) {
      if (!is.null(outcome$ok) && outcome$ok$visible) {
        data <- tryCatch(bundle(outcome$ok$value), error = function(e) NULL)
        if (!is.null(data)) {
          closing <- c(closing, list(list(type = "execute_result", parent_id = msg_id, execution_count = count, data = data)))
        }
      }
    }
    reply <- list(type = "execute_reply", parent_id = msg_id, status = "ok", execution_count = count)
    if (!is.null(outcome$err)) {
      err <- outcome$err
      closing <- c(closing, list(c(list(type = "error", parent_id = msg_id), err)))
      reply$status <- "error"
      reply <- c(reply, err)
    }
    closing <- c(closing, list(reply, list(type = "status", parent_id = msg_id, state = "idle")))
    do.call(emit, closing)
  }

  serve <- function() {
    emit(list(type = "kh_ready"))
    repeat {
      req <- read_request()
      if (is.null(req)) return(invisible())
      # An interrupt that arrived while no code ran is for no request.
      tryCatch(allowInterrupts(Sys.sleep(0)), interrupt = function(i) NULL)
      execute(req)
    }
  }
  suspendInterrupts(serve())
})
quit(save = "no", status = 0)
