package io.starlight.rabbitmq.proxy;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.function.BooleanSupplier;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Sidecar mode: probes the gateway container's Unix socket once a second, logs each change
 * (one line when it stops answering, one when it is back), and keeps the proxy's status file
 * (statusFilePath, which /status.html and so the Apache Pulsar chart's probes read) present only
 * while the gateway answers.
 */
final class SidecarWatch {
  private static final Logger LOG = LoggerFactory.getLogger(SidecarWatch.class);
  static final long PROBE_INTERVAL_MS = 1_000;

  private final Path socket;
  private final BooleanSupplier probe;
  private final Path statusFile; // null: the proxy's status is not ours to hold
  private final CountDownLatch firstReady = new CountDownLatch(1);
  private final CountDownLatch stopRequested = new CountDownLatch(1);
  private volatile Boolean ready; // null until the first probe
  private Thread thread;

  SidecarWatch(Path socket, BooleanSupplier probe, Path statusFile) {
    this.socket = socket;
    this.probe = probe;
    this.statusFile = statusFile;
  }

  void start() {
    thread = new Thread(this::watchLoop, "starlight-rabbitmq-sidecar-watch");
    thread.setDaemon(true);
    thread.start();
  }

  /** Whether the gateway answered the last probe. */
  boolean ready() {
    return Boolean.TRUE.equals(ready);
  }

  /** Waits until the gateway first answers; false after {@code timeoutMs}. */
  boolean awaitReady(long timeoutMs) {
    try {
      return firstReady.await(timeoutMs, TimeUnit.MILLISECONDS);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      return false;
    }
  }

  void stop() {
    stopRequested.countDown();
    if (thread != null && thread != Thread.currentThread()) {
      try {
        thread.join(5_000);
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
      }
    }
  }

  /** One probe and what follows from it (the loop's body; tests call it directly). */
  void probeOnce() {
    boolean now = probe.getAsBoolean();
    Boolean before = ready;
    ready = now;
    if (now) {
      firstReady.countDown();
    }
    if (before != null && before == now) {
      return;
    }
    if (now) {
      LOG.info("the gateway container answers at {}: relaying AMQP connections to it", socket);
    } else {
      LOG.warn(
          "the gateway container does not answer at {}: AMQP connections are closed at once{} "
              + "until it does",
          socket,
          statusFile == null ? "" : " and the proxy reports not ready (" + statusFile + " removed)");
    }
    holdStatus(now);
  }

  private void holdStatus(boolean gatewayReady) {
    if (statusFile == null) {
      return;
    }
    try {
      if (gatewayReady) {
        if (!Files.isRegularFile(statusFile)) {
          Files.writeString(statusFile, "OK\n", StandardCharsets.UTF_8);
        }
      } else {
        Files.deleteIfExists(statusFile);
      }
    } catch (IOException e) {
      LOG.warn("cannot {} the proxy's status file {}: {}", gatewayReady ? "write" : "remove", statusFile, e.toString());
    }
  }

  private void watchLoop() {
    try {
      do {
        probeOnce();
      } while (!stopRequested.await(PROBE_INTERVAL_MS, TimeUnit.MILLISECONDS));
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
  }
}
