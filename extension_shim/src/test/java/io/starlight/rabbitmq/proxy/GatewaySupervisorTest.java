package io.starlight.rabbitmq.proxy;

import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.function.BooleanSupplier;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** Supervision with a stand-in child (a shell): readiness, restart after a kill, stop. */
class GatewaySupervisorTest {
  @TempDir Path dir;

  private static void waitFor(BooleanSupplier condition, String what) throws InterruptedException {
    long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(20);
    while (!condition.getAsBoolean()) {
      assertTrue(System.nanoTime() < deadline, "timed out waiting for " + what);
      Thread.sleep(20);
    }
  }

  @Test
  void restartsAChildThatDiesAndStopsItForGood() throws Exception {
    Path ready = dir.resolve("ready");
    // Ready once it has written its pid; then it serves until killed.
    List<String> command = List.of("/bin/sh", "-c", "echo $$ > " + ready + "; exec sleep 600");
    GatewaySupervisor supervisor = new GatewaySupervisor(command, () -> Files.exists(ready), 5_000, 1_000);
    supervisor.start();
    supervisor.awaitFirstStart(20_000);
    long first = supervisor.pid();
    assertTrue(first > 0);
    Files.delete(ready);
    ProcessHandle.of(first).orElseThrow().destroyForcibly(); // kill -9
    waitFor(() -> supervisor.starts() == 2 && supervisor.pid() > 0 && supervisor.pid() != first, "a restart");
    long second = supervisor.pid();
    supervisor.stop();
    assertFalse(ProcessHandle.of(second).map(ProcessHandle::isAlive).orElse(false));
    assertTrue(supervisor.pid() < 0);
  }

  @Test
  void aChildThatExitsBeforeItIsReadyFailsTheFirstStartWithItsOwnReason() throws Exception {
    List<String> command =
        List.of("/bin/sh", "-c", "echo 'starlight-rabbitmq: configuration error: x.conf:1: unknown key' >&2; exit 2");
    GatewaySupervisor supervisor = new GatewaySupervisor(command, () -> false, 5_000, 60_000);
    supervisor.start();
    ShimConfigException e = assertThrows(ShimConfigException.class, () -> supervisor.awaitFirstStart(20_000));
    assertTrue(e.getMessage().contains("exited with code 2"), e.getMessage());
    assertTrue(e.getMessage().contains("configuration error: x.conf:1: unknown key"), e.getMessage());
    supervisor.stop();
  }

  @Test
  void aCommandThatCannotRunIsReported() throws Exception {
    GatewaySupervisor supervisor =
        new GatewaySupervisor(List.of(dir.resolve("missing").toString()), () -> false, 5_000, 60_000);
    supervisor.start();
    ShimConfigException e = assertThrows(ShimConfigException.class, () -> supervisor.awaitFirstStart(20_000));
    assertTrue(e.getMessage().startsWith("cannot run " + dir.resolve("missing")), e.getMessage());
    supervisor.stop();
  }

  @Test
  void theCommandCheckNamesTheKey() {
    ShimConfigException e =
        assertThrows(
            ShimConfigException.class,
            () -> StarlightRabbitMQExtension.checkCommand(List.of("no-such-gateway-command-x")));
    assertTrue(e.getMessage().startsWith("amqpGatewayCommand: 'no-such-gateway-command-x' is not on the proxy's PATH"));
  }
}
