package io.starlight.rabbitmq.proxy;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.concurrent.atomic.AtomicBoolean;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** Sidecar mode: the proxy's status file follows the gateway container's answers. */
class SidecarWatchTest {
  @TempDir Path directory;

  @Test
  void theStatusFileIsPresentOnlyWhileTheGatewayAnswers() throws Exception {
    Path status = directory.resolve("status");
    Files.writeString(status, "OK"); // what the Apache Pulsar chart writes before the proxy starts
    AtomicBoolean answers = new AtomicBoolean(false);
    SidecarWatch watch = new SidecarWatch(directory.resolve("amqp.sock"), answers::get, status);
    watch.probeOnce();
    assertFalse(watch.ready());
    assertFalse(Files.exists(status));
    assertFalse(watch.awaitReady(1));
    answers.set(true);
    watch.probeOnce();
    assertTrue(watch.ready());
    assertTrue(watch.awaitReady(1));
    assertEquals("OK\n", Files.readString(status));
    answers.set(false);
    watch.probeOnce();
    assertFalse(Files.exists(status));
    answers.set(true);
    watch.probeOnce();
    assertTrue(Files.isRegularFile(status));
  }

  @Test
  void withoutAStatusFileOnlyReadinessIsTracked() {
    AtomicBoolean answers = new AtomicBoolean(true);
    SidecarWatch watch = new SidecarWatch(directory.resolve("amqp.sock"), answers::get, null);
    watch.probeOnce();
    assertTrue(watch.ready());
    answers.set(false);
    watch.probeOnce();
    assertFalse(watch.ready());
    assertFalse(Files.exists(directory.resolve("status")));
  }
}
