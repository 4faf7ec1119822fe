package io.starlight.rabbitmq.proxy;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.function.BooleanSupplier;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Runs the Python gateway as a child process: starts it, tells when it is ready, restarts it with
 * a growing delay when it dies, and stops it (SIGTERM, then SIGKILL after the stop timeout). The
 * child's output goes into the proxy's logging, one log event per line, at the line's level.
 */
final class GatewaySupervisor {
  private static final Logger LOG = LoggerFactory.getLogger(GatewaySupervisor.class);
  /** The gateway's own log lines, re-logged by the proxy's logging. */
  private static final Logger GATEWAY_LOG = LoggerFactory.getLogger("starlight-rabbitmq.gateway");
  /** "2026-11-25 01:57:15,123 INFO gateway.connection: connection opened ..." (gateway/cli.py). */
  private static final Pattern LINE =
      Pattern.compile("\\d{4}-\\d\\d-\\d\\d \\d\\d:\\d\\d:\\d\\d,\\d+ (DEBUG|INFO|WARNING|ERROR|CRITICAL) (.*)");

  private static final long PROBE_INTERVAL_MS = 100;
  private static final long FIRST_RESTART_DELAY_MS = 500;
  /** A child that served this long is healthy: its death restarts at the first delay again. */
  private static final long HEALTHY_UPTIME_MS = 60_000;

  private final List<String> command;
  private final BooleanSupplier readinessProbe;
  private final long stopTimeoutMs;
  private final long restartMaxDelayMs;
  private final CompletableFuture<Void> firstStart = new CompletableFuture<>();
  private final CountDownLatch stopRequested = new CountDownLatch(1);
  private final Object lock = new Object();
  private Process current; // guarded by lock
  private boolean stopping; // guarded by lock
  private Thread thread;
  private volatile String lastProblem;
  private volatile int starts;

  GatewaySupervisor(
      List<String> command, BooleanSupplier readinessProbe, long stopTimeoutMs, long restartMaxDelayMs) {
    this.command = List.copyOf(command);
    this.readinessProbe = readinessProbe;
    this.stopTimeoutMs = stopTimeoutMs;
    this.restartMaxDelayMs = restartMaxDelayMs;
  }

  void start() {
    thread = new Thread(this::superviseLoop, "starlight-rabbitmq-supervisor");
    thread.setDaemon(true);
    thread.start();
  }

  /**
   * Waits until the first child is ready. Throws {@link ShimConfigException} with the child's own
   * one-line reason when it exits before (a configuration error, Pulsar unreachable, ...), and
   * {@link TimeoutException} when it is not ready in time (it keeps being supervised).
   */
  void awaitFirstStart(long timeoutMs) throws ShimConfigException, TimeoutException, InterruptedException {
    try {
      firstStart.get(timeoutMs, TimeUnit.MILLISECONDS);
    } catch (ExecutionException e) {
      throw new ShimConfigException(e.getCause().getMessage());
    }
  }

  /** The running child's process id, or -1. */
  long pid() {
    synchronized (lock) {
      return current != null && current.isAlive() ? current.pid() : -1;
    }
  }

  int starts() {
    return starts;
  }

  /** Stops the child and the supervision; idempotent, safe from a shutdown hook. */
  void stop() {
    Process process;
    synchronized (lock) {
      if (stopping) {
        process = null;
      } else {
        stopping = true;
        process = current;
      }
    }
    stopRequested.countDown();
    if (process != null && process.isAlive()) {
      LOG.info("stopping the gateway (pid {})", process.pid());
      process.destroy(); // SIGTERM: the gateway closes its clients with 320 and exits
      try {
        if (!process.waitFor(stopTimeoutMs, TimeUnit.MILLISECONDS)) {
          LOG.warn("the gateway (pid {}) did not stop in {} ms: killing it", process.pid(), stopTimeoutMs);
          process.destroyForcibly();
          process.waitFor(5, TimeUnit.SECONDS);
        }
      } catch (InterruptedException e) {
        process.destroyForcibly();
        Thread.currentThread().interrupt();
      }
    }
    if (thread != null && thread != Thread.currentThread()) {
      try {
        thread.join(5_000);
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
      }
    }
  }

  private void superviseLoop() {
    int failures = 0;
    while (true) {
      Process process;
      synchronized (lock) {
        if (stopping) {
          return;
        }
        try {
          process = new ProcessBuilder(command).redirectErrorStream(true).start();
        } catch (IOException e) {
          process = null;
          lastProblem = "cannot run " + String.join(" ", command) + ": " + e.getMessage();
        }
        current = process;
      }
      long started = System.nanoTime();
      boolean ready = false;
      int code = -1;
      if (process != null) {
        starts++;
        LOG.info("started the gateway (pid {}): {}", process.pid(), String.join(" ", command));
        Thread pump = pumpOutput(process);
        ready = waitReady(process, started);
        code = waitExit(process);
        joinQuietly(pump);
      }
      if (isStopping()) {
        return;
      }
      String why = process == null ? lastProblem : exitDescription(code);
      if (!ready) {
        firstStart.completeExceptionally(new IllegalStateException(why));
      }
      long uptimeMs = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - started);
      failures = ready && uptimeMs >= HEALTHY_UPTIME_MS ? 1 : failures + 1;
      long delay = Math.min(restartMaxDelayMs, FIRST_RESTART_DELAY_MS << Math.min(failures - 1, 20));
      LOG.warn("{}; restarting it in {} ms", why, delay);
      try {
        if (stopRequested.await(delay, TimeUnit.MILLISECONDS)) {
          return;
        }
      } catch (InterruptedException e) {
        return;
      }
    }
  }

  private String exitDescription(int code) {
    String reason = lastProblem == null ? "" : " (" + lastProblem + ")";
    return "the gateway exited with code " + code + reason;
  }

  private boolean isStopping() {
    synchronized (lock) {
      return stopping;
    }
  }

  /** Probes until the child is ready (true) or exits (false). */
  private boolean waitReady(Process process, long started) {
    try {
      while (process.isAlive() && !isStopping()) {
        if (readinessProbe.getAsBoolean()) {
          long ms = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - started);
          LOG.info("the gateway (pid {}) is ready, {} ms after its start", process.pid(), ms);
          lastProblem = null;
          firstStart.complete(null);
          return true;
        }
        process.waitFor(PROBE_INTERVAL_MS, TimeUnit.MILLISECONDS);
      }
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
    return false;
  }

  private static int waitExit(Process process) {
    while (true) {
      try {
        return process.waitFor();
      } catch (InterruptedException e) {
        // Only stop() ends the child; keep waiting for it.
      }
    }
  }

  private Thread pumpOutput(Process process) {
    Thread pump =
        new Thread(
            () -> {
              try (BufferedReader lines =
                  new BufferedReader(
                      new InputStreamReader(process.getInputStream(), StandardCharsets.UTF_8))) {
                String line;
                String level = "INFO";
                while ((line = lines.readLine()) != null) {
                  Matcher match = LINE.matcher(line);
                  String message = line;
                  if (match.matches()) {
                    level = match.group(1);
                    message = match.group(2);
                  } else if (line.startsWith("starlight-rabbitmq: ")) {
                    level = "ERROR"; // the command's own last words: configuration, start-up
                  }
                  log(level, message);
                  if (line.startsWith("starlight-rabbitmq: ") || level.equals("ERROR") || level.equals("CRITICAL")) {
                    lastProblem = line.startsWith("starlight-rabbitmq: ") ? line.substring(20) : message;
                  }
                }
              } catch (IOException e) {
                // The child is gone; its exit is reported by the supervisor.
              }
            },
            "starlight-rabbitmq-output-" + process.pid());
    pump.setDaemon(true);
    pump.start();
    return pump;
  }

  private static void log(String level, String message) {
    switch (level) {
      case "DEBUG" -> GATEWAY_LOG.debug(message);
      case "WARNING" -> GATEWAY_LOG.warn(message);
      case "ERROR", "CRITICAL" -> GATEWAY_LOG.error(message);
      default -> GATEWAY_LOG.info(message);
    }
  }

  private static void joinQuietly(Thread thread) {
    try {
      thread.join(2_000);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
  }

  /** The command line: the configured command, then the gateway's own arguments. */
  static List<String> commandLine(List<String> command, String configFile, String logLevel) {
    List<String> line = new ArrayList<>(command);
    line.addAll(List.of("-c", configFile, "--log-level", logLevel, "--stop-on-stdin-close"));
    return line;
  }
}
