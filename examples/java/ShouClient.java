/*
 * ShouClient: start a run on a `shou serve` server and follow its events (docs/serve.md), JDK only.
 *
 * Run it straight from source (Java 17+):
 *     java examples/java/ShouClient.java [--url URL] [--token TOKEN] [--session NAME] TASK...
 * or compile it first:
 *     javac -d out examples/java/ShouClient.java && java -cp out ShouClient "What is 6*7?"
 *
 * URL defaults to $SHOU_URL, then http://127.0.0.1:8300; TOKEN to $SHOU_TOKEN (a bearer token from the
 * server's --tokens file, or the one in the link a server without --tokens prints). It POSTs the task
 * to /v1/runs, then reads GET /v1/runs/{id}/events as Server-Sent Events and prints each event as it
 * arrives. If the stream drops before the run finishes it reconnects with `Last-Event-ID` (the last
 * `id:` it saw), so no event is lost or printed twice.
 * Exit status: 0 if the run completed, 1 if it ended otherwise, 2 on an error (HTTP 4xx/5xx, no server).
 * Output is UTF-8; Java decodes the arguments with the locale's charset, so use a UTF-8 locale
 * (e.g. LC_ALL=C.UTF-8) for a task that is not ASCII.
 */

import java.io.FileDescriptor;
import java.io.FileOutputStream;
import java.io.IOException;
import java.io.PrintStream;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.*;
import java.util.stream.Collectors;
import java.util.stream.Stream;

public class ShouClient {
    static final PrintStream out = new PrintStream(new FileOutputStream(FileDescriptor.out), true, StandardCharsets.UTF_8);
    static final PrintStream err = new PrintStream(new FileOutputStream(FileDescriptor.err), true, StandardCharsets.UTF_8);
    static final int MAX_RETRIES = 5;

    final HttpClient http = HttpClient.newBuilder().version(HttpClient.Version.HTTP_1_1)
            .connectTimeout(Duration.ofSeconds(10)).build();
    final String url, token;
    String lastId = null;       // the last SSE `id:` seen: where a reconnection resumes
    boolean midLine = false;    // streamed text is on the current output line
    final StringBuilder streamed = new StringBuilder();  // text deltas printed since the last model_response

    ShouClient(String url, String token) { this.url = url.replaceAll("/+$", ""); this.token = token; }

    public static void main(String[] argv) {
        String url = env("SHOU_URL", "http://127.0.0.1:8300"), token = env("SHOU_TOKEN", null), session = null;
        List<String> task = new ArrayList<>();
        for (int i = 0; i < argv.length; i++) {
            String a = argv[i];
            if (a.equals("--")) { task.addAll(Arrays.asList(argv).subList(i + 1, argv.length)); break; }
            else if (a.equals("-h") || a.equals("--help")) usage(0);
            else if (a.equals("--url") || a.equals("--token") || a.equals("--session")) {
                if (i + 1 >= argv.length) usage(2);
                String v = argv[++i];
                if (a.equals("--url")) url = v; else if (a.equals("--token")) token = v; else session = v;
            } else if (a.startsWith("--")) usage(2);
            else task.add(a);
        }
        if (task.isEmpty()) usage(2);
        System.exit(new ShouClient(url, token).run(String.join(" ", task), session));
    }

    static String env(String name, String fallback) {
        String v = System.getenv(name);
        return v == null || v.isEmpty() ? fallback : v;
    }

    static void usage(int code) {
        (code == 0 ? out : err).println(
                "usage: java ShouClient.java [--url URL] [--token TOKEN] [--session NAME] TASK...");
        System.exit(code);
    }

    HttpRequest.Builder request(String path) {
        HttpRequest.Builder b = HttpRequest.newBuilder(URI.create(url + path));
        if (token != null) b.header("Authorization", "Bearer " + token);
        return b;
    }

    int run(String task, String session) {
        String body = "{\"task\": " + Json.quote(task) + (session == null ? "" : ", \"session\": " + Json.quote(session)) + "}";
        String runId;
        try {
            HttpResponse<String> r = http.send(request("/v1/runs").header("Content-Type", "application/json")
                    .POST(HttpRequest.BodyPublishers.ofString(body)).build(), HttpResponse.BodyHandlers.ofString());
            if (r.statusCode() >= 400) return fail(r.statusCode(), r.body());
            runId = str(Json.map(Json.parse(r.body())), "run_id");
            if (runId.isEmpty()) throw new IllegalStateException("no run_id in " + r.body());
        } catch (IOException | InterruptedException | RuntimeException e) {
            err.println("error: could not start the run at " + url + ": " + describe(e));
            return 2;
        }
        err.println("run " + runId);
        for (int failures = 0; ; ) {
            String seenBefore = lastId;
            try {
                Integer code = follow(runId);
                if (code != null) return code;
                endLine();
                err.println("(the event stream ended before the run finished)");
            } catch (HttpError e) {
                return fail(e.status, e.body);
            } catch (IOException | InterruptedException e) {
                endLine();
                err.println("(connection lost: " + describe(e) + ")");
            }
            if (!Objects.equals(seenBefore, lastId)) failures = 0;  // progress was made: a fresh set of retries
            if (++failures > MAX_RETRIES) {
                err.println("error: gave up on the event stream after " + MAX_RETRIES + " retries");
                return 2;
            }
            long wait = Math.min(8000, 500L << (failures - 1));
            err.println("(reconnecting in " + wait + " ms after event " + lastId + ")");
            try { Thread.sleep(wait); } catch (InterruptedException e) { return 2; }
        }
    }

    /** Read the run's event stream; the exit status once the run finished, null if the stream ended first. */
    Integer follow(String runId) throws IOException, InterruptedException {
        HttpRequest.Builder b = request("/v1/runs/" + runId + "/events").header("Accept", "text/event-stream");
        if (lastId != null) b.header("Last-Event-ID", lastId);
        HttpResponse<Stream<String>> r = http.send(b.GET().build(), HttpResponse.BodyHandlers.ofLines());
        try (Stream<String> lines = r.body()) {
            if (r.statusCode() >= 400) throw new HttpError(r.statusCode(), lines.collect(Collectors.joining("\n")));
            String id = null, event = "message";
            StringBuilder data = new StringBuilder();
            Iterator<String> it = lines.iterator();
            try {
                while (it.hasNext()) {
                    String line = it.next();
                    if (line.isEmpty()) {  // a blank line dispatches the message
                        if (id != null) lastId = id;
                        if (data.length() > 0) {
                            Integer code = handle(event, runId, data.toString());
                            if (code != null) return code;
                        }
                        id = null; event = "message"; data.setLength(0);
                        continue;
                    }
                    if (line.startsWith(":")) continue;  // keep-alive comment
                    int colon = line.indexOf(':');
                    String field = colon < 0 ? line : line.substring(0, colon);
                    String value = colon < 0 ? "" : line.substring(colon + 1);
                    if (value.startsWith(" ")) value = value.substring(1);
                    switch (field) {
                        case "id" -> id = value;
                        case "event" -> event = value;
                        case "data" -> data.append(data.length() > 0 ? "\n" : "").append(value);
                        default -> { }  // `retry:` and unknown fields
                    }
                }
            } catch (java.io.UncheckedIOException e) {
                throw e.getCause();  // ofLines() reports a broken connection this way
            }
        }
        return null;
    }

    /** Print one event; the exit status if it is the run's final run_finished. */
    Integer handle(String event, String runId, String data) {
        Map<String, Object> e;
        try {
            e = Json.map(Json.parse(data));
        } catch (IllegalArgumentException bad) {  // not JSON: show it as it came
            line("[" + event + "] " + data);
            return null;
        }
        String type = e.get("type") instanceof String t ? t : event;
        String indent = str(e, "parent").isEmpty() ? "" : "  ";
        switch (type) {
            case "text_delta" -> {
                if (!indent.isEmpty()) return null;  // a sub-run's text: its result is shown when it ends
                out.print(str(e, "text"));
                out.flush();
                streamed.append(str(e, "text"));
                midLine = true;
                return null;
            }
            case "tool_call_delta" -> { return null; }  // the whole call follows in tool_call_started
            case "model_response" -> {
                // Fragments are not stored: after a reconnection (or when the server skips the ones the complete
                // message already covers) only part of the text was streamed. Show what is missing.
                String content = Json.map(e.get("message")).get("content") instanceof String c ? c : "";
                String shown = indent.isEmpty() ? streamed.toString() : "";
                if (!shown.isEmpty() && content.startsWith(shown)) out.print(content.substring(shown.length()));
                else if (!content.isBlank()) line(indent + "[model_response] " + content);
                endLine();
                if (indent.isEmpty()) streamed.setLength(0);
                return null;
            }
            default -> { }
        }
        String detail = switch (type) {
            case "run_started" -> str(e, "task");
            case "tool_call_started", "approval_requested" -> {
                Map<String, Object> fn = Json.map(Json.map(e.get("call")).get("function"));
                String why = type.equals("approval_requested") ? "  (" + str(e, "why") + ")" : "";
                yield str(fn, "name") + " " + str(fn, "arguments") + why;
            }
            case "tool_call_finished" -> str(e, "name") + " -> "
                    + (Boolean.TRUE.equals(e.get("is_error")) ? "error: " : "") + oneLine(str(e, "content"));
            case "notice" -> str(e, "kind") + ": " + str(e, "text");
            case "plan" -> {
                StringBuilder s = new StringBuilder("revision " + str(e, "revision"));
                for (Object step : Json.list(e.get("steps")))
                    s.append("\n").append(indent).append("  - [").append(str(Json.map(step), "status")).append("] ")
                            .append(str(Json.map(step), "text"));
                yield s.toString();
            }
            case "run_finished" -> str(e, "status").equals("waiting_approval")
                    ? "waiting_approval (decide with POST /v1/approvals/{call_id}; the run goes on)" : str(e, "status");
            default -> e.containsKey("step") ? "step " + str(e, "step") : "";  // model_request, step_finished, ...
        };
        String status = str(e, "status");
        boolean last = type.equals("run_finished") && runId.equals(e.get("run_id")) && !status.equals("waiting_approval");
        if (!last) {
            line(indent + "[" + type + "] " + detail);
            return null;
        }
        line("answer: " + str(e, "answer"));
        if (!str(e, "error").isEmpty()) line("error: " + str(e, "error"));
        line("status: " + status);
        return status.equals("completed") ? 0 : 1;
    }

    void line(String s) { endLine(); out.println(s); }

    void endLine() { if (midLine) { out.println(); midLine = false; } }

    static String str(Map<String, Object> m, String key) {
        Object v = m.get(key);
        if (v == null) return "";
        if (v instanceof Double d && d == Math.rint(d) && !d.isInfinite()) return String.valueOf(d.longValue());
        return v instanceof String s ? s : Json.write(v);
    }

    static String describe(Exception e) {
        return e.getMessage() == null ? e.getClass().getSimpleName() : e.getClass().getSimpleName() + ": " + e.getMessage();
    }

    static String oneLine(String s) {
        s = s.strip().replace("\n", " | ");
        return s.length() > 300 ? s.substring(0, 300) + "..." : s;
    }

    /** Print the server's error message ({"error": {"message": ...}}) and answer exit status 2. */
    static int fail(int status, String body) {
        String message = body;
        try {
            message = str(Json.map(Json.map(Json.parse(body)).get("error")), "message");
        } catch (RuntimeException e) { /* not the documented JSON: show the body as it is */ }
        if (message.isEmpty()) message = body;
        err.println("error: HTTP " + status + ": " + message);
        return 2;
    }

    static class HttpError extends IOException {
        private static final long serialVersionUID = 1L;
        final int status; final String body;
        HttpError(int status, String body) { super("HTTP " + status); this.status = status; this.body = body; }
    }

    /** A small JSON reader and writer: objects are LinkedHashMaps, arrays Lists, numbers Doubles. */
    static final class Json {
        private final String s;
        private int i;

        private Json(String s) { this.s = s; }

        static Object parse(String text) {
            Json p = new Json(text);
            Object v = p.value();
            p.ws();
            if (p.i != text.length()) throw p.error("trailing characters");
            return v;
        }

        @SuppressWarnings("unchecked")
        static Map<String, Object> map(Object v) { return v instanceof Map ? (Map<String, Object>) v : Map.of(); }

        @SuppressWarnings("unchecked")
        static List<Object> list(Object v) { return v instanceof List ? (List<Object>) v : List.of(); }

        private Object value() {
            ws();
            if (i >= s.length()) throw error("unexpected end");
            char c = s.charAt(i);
            switch (c) {
                case '{': {
                    i++;
                    Map<String, Object> m = new LinkedHashMap<>();
                    if (peek('}')) return m;
                    do {
                        ws();
                        if (i >= s.length() || s.charAt(i) != '"') throw error("expected a string key");
                        String key = string();
                        expect(':');
                        m.put(key, value());
                    } while (peek(','));
                    expect('}');
                    return m;
                }
                case '[': {
                    i++;
                    List<Object> l = new ArrayList<>();
                    if (peek(']')) return l;
                    do l.add(value()); while (peek(','));
                    expect(']');
                    return l;
                }
                case '"': return string();
                default:
                    if (s.startsWith("true", i)) { i += 4; return true; }
                    if (s.startsWith("false", i)) { i += 5; return false; }
                    if (s.startsWith("null", i)) { i += 4; return null; }
                    int start = i;
                    while (i < s.length() && "+-0123456789.eE".indexOf(s.charAt(i)) >= 0) i++;
                    try { return Double.parseDouble(s.substring(start, i)); }
                    catch (NumberFormatException e) { i = start; throw error("unexpected character"); }
            }
        }

        private String string() {
            StringBuilder b = new StringBuilder();
            for (i++; ; ) {
                if (i >= s.length()) throw error("unterminated string");
                char c = s.charAt(i++);
                if (c == '"') return b.toString();
                if (c != '\\') { b.append(c); continue; }
                if (i >= s.length()) throw error("unterminated string");
                char e = s.charAt(i++);
                switch (e) {
                    case 'n' -> b.append('\n');
                    case 't' -> b.append('\t');
                    case 'r' -> b.append('\r');
                    case 'b' -> b.append('\b');
                    case 'f' -> b.append('\f');
                    case 'u' -> {
                        if (i + 4 > s.length()) throw error("bad \\u escape");
                        b.append((char) Integer.parseInt(s.substring(i, i + 4), 16));  // surrogate pairs join up
                        i += 4;
                    }
                    default -> b.append(e);  // \" \\ \/
                }
            }
        }

        private void ws() { while (i < s.length() && " \t\r\n".indexOf(s.charAt(i)) >= 0) i++; }

        private boolean peek(char c) {
            ws();
            if (i < s.length() && s.charAt(i) == c) { i++; return true; }
            return false;
        }

        private void expect(char c) { if (!peek(c)) throw error("expected '" + c + "'"); }

        private IllegalArgumentException error(String what) {
            return new IllegalArgumentException("bad JSON at " + i + ": " + what);
        }

        /** A JSON string literal for `text`. */
        static String quote(String text) {
            StringBuilder b = new StringBuilder("\"");
            for (char c : text.toCharArray()) {
                switch (c) {
                    case '"' -> b.append("\\\"");
                    case '\\' -> b.append("\\\\");
                    case '\n' -> b.append("\\n");
                    case '\r' -> b.append("\\r");
                    case '\t' -> b.append("\\t");
                    default -> {
                        if (c < 0x20) b.append(String.format("\\u%04x", (int) c));
                        else b.append(c);
                    }
                }
            }
            return b.append('"').toString();
        }

        /** The JSON text of a parsed value (for showing nested values on one line). */
        static String write(Object v) {
            if (v == null) return "null";
            if (v instanceof String str) return quote(str);
            if (v instanceof Double d) return d == Math.rint(d) && !d.isInfinite() ? String.valueOf(d.longValue()) : d.toString();
            if (v instanceof Map<?, ?> m) return m.entrySet().stream()
                    .map(e -> quote(String.valueOf(e.getKey())) + ": " + write(e.getValue()))
                    .collect(Collectors.joining(", ", "{", "}"));
            if (v instanceof List<?> l) return l.stream().map(Json::write).collect(Collectors.joining(", ", "[", "]"));
            return String.valueOf(v);
        }
    }
}
