package io.starlight.rabbitmq.proxy;

import io.netty.channel.ChannelInitializer;
import io.netty.channel.socket.SocketChannel;
import java.io.File;
import java.io.IOException;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.net.StandardProtocolFamily;
import java.net.UnixDomainSocketAddress;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.attribute.PosixFilePermissions;
import java.util.Comparator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.TimeoutException;
import java.util.function.BooleanSupplier;
import java.util.stream.Stream;
import org.apache.pulsar.proxy.extensions.ProxyExtension;
import org.apache.pulsar.proxy.server.ProxyConfiguration;
import org.apache.pulsar.proxy.server.ProxyService;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The {@code rabbitmq} proxy extension: the Python gateway beside a Pulsar proxy
 * (docs/proxy-extension.md). The gateway does all AMQP work; this class configures it from
 * proxy.conf and supervises it as a child process (child mode), or watches the gateway another
 * container runs (sidecar mode), and (relay mode) relays the connections the proxy accepts on
 * amqpListeners to it over a Unix socket.
 */
public final class StarlightRabbitMQExtension implements ProxyExtension {
  private static final Logger LOG = LoggerFactory.getLogger(StarlightRabbitMQExtension.class);
  static final String NAME = "rabbitmq";

  private ShimSettings settings;
  private Path workDirectory;
  private boolean ownWorkDirectory;
  private Path socket;
  private Path configFile;
  private GatewaySupervisor supervisor;
  private Relay relay;
  private Thread shutdownHook;
  private Path statusFile; // sidecar mode: the proxy's statusFilePath, when it follows the gateway
  private SidecarWatch sidecar;

  @Override
  public String extensionName() {
    return NAME;
  }

  @Override
  public boolean accept(String protocol) {
    return NAME.equalsIgnoreCase(protocol) || "amqp".equalsIgnoreCase(protocol);
  }

  @Override
  public void initialize(ProxyConfiguration conf) throws Exception {
    try {
      prepare(conf.getProperties());
    } catch (ShimConfigException e) {
      // The one line an operator needs; the proxy then reports the failed start its own way.
      LOG.error("Starlight for RabbitMQ cannot start: {}", e.getMessage());
      cleanUpWorkDirectory();
      throw e;
    }
  }

  /** Everything initialize does, on plain properties (tests call it without a proxy). */
  void prepare(Properties proxy) throws ShimConfigException {
    settings = ShimSettings.from(proxy);
    boolean sidecar = settings.gatewayMode() == ShimSettings.GatewayMode.SIDECAR;
    if (!sidecar) {
      checkCommand(settings.command());
    }
    if (settings.mode() == ShimSettings.Mode.RELAY) {
      String unavailable = Relay.unavailableReason();
      if (unavailable != null) {
        throw new ShimConfigException(
            ShimSettings.MODE + "=relay needs Unix sockets: " + unavailable + "; use " + ShimSettings.MODE + "=direct");
      }
    }
    for (AmqpListener listener : settings.listeners()) {
      checkBindable(listener);
    }
    createWorkDirectory();
    socket = workDirectory.resolve("amqp.sock");
    if (sidecar) {
      prepareSidecar(proxy);
      return;
    }
    Map<String, String> config =
        GatewayConfigTranslator.translate(proxy, settings, GatewayConfigTranslator.gatewayKeys(), socket);
    if (settings.mode() == ShimSettings.Mode.RELAY) {
      // Allowed (translate refuses otherwise): said loudly, as the gateway says it of its own.
      List<AmqpListener> open = GatewayConfigTranslator.openRemoteListeners(config, settings.listeners());
      if (!open.isEmpty()) {
        LOG.warn(
            "AUTHENTICATION IS OFF on {}, which other machines can reach: anyone connects with any "
                + "user name and password (amqpAllowUnauthenticatedRemote=true; set "
                + "authenticationEnabled=true to require credentials)",
            open.stream().map(AmqpListener::url).toList());
      }
    }
    configFile = workDirectory.resolve("gateway.conf");
    try {
      Files.deleteIfExists(configFile);
      Files.createFile(configFile, PosixFilePermissions.asFileAttribute(PosixFilePermissions.fromString("rw-------")));
      Files.writeString(configFile, GatewayConfigTranslator.render(config), StandardCharsets.UTF_8);
    } catch (IOException e) {
      throw new ShimConfigException("cannot write the gateway's configuration " + configFile + ": " + e.getMessage());
    }
    LOG.info(
        "Starlight for RabbitMQ: {} mode, listeners {}, gateway configuration {} ({} keys from proxy.conf)",
        settings.mode().name().toLowerCase(),
        settings.listeners().stream().map(AmqpListener::url).toList(),
        configFile,
        config.size());
  }

  /**
   * Sidecar mode: the gateway is another container's, configured there; the extension only
   * relays to its socket, watches it, and (with statusFilePath) holds the proxy's /status.html.
   */
  private void prepareSidecar(Properties proxy) throws ShimConfigException {
    // The sidecar's own authenticationEnabled decides who gets in; proxy.conf must still say
    // that a relay other machines reach is meant to be open (as in child mode), since the
    // gateway behind a Unix socket cannot tell.
    Map<String, String> auth = new LinkedHashMap<>();
    for (String key : List.of("authenticationEnabled", "amqpAllowUnauthenticatedRemote")) {
      String value = proxy.getProperty(key);
      if (value != null) {
        auth.put(key, value.trim());
      }
    }
    List<AmqpListener> open = GatewayConfigTranslator.openRemoteListeners(auth, settings.listeners());
    if (!open.isEmpty() && !"true".equalsIgnoreCase(auth.get("amqpAllowUnauthenticatedRemote"))) {
      throw new ShimConfigException(
          "amqpListeners: " + open.get(0).url() + " is reachable from other machines and "
              + "authenticationEnabled is false in proxy.conf: set authenticationEnabled=true (and "
              + "the same in the gateway container), listen on 127.0.0.1 only, or set "
              + "amqpAllowUnauthenticatedRemote=true");
    }
    String status = ShimSettings.value(proxy, "statusFilePath", "");
    statusFile = settings.gatewayGatesProxyStatus() && !status.isEmpty() ? Path.of(status) : null;
    LOG.info(
        "Starlight for RabbitMQ: sidecar mode, listeners {} relayed to the gateway container's "
            + "socket {}; {}",
        settings.listeners().stream().map(AmqpListener::url).toList(),
        socket,
        statusFile != null
            ? "the proxy's status file " + statusFile + " (/status.html) follows the gateway's readiness"
            : "the proxy's /status.html does not follow the gateway ("
                + (settings.gatewayGatesProxyStatus()
                    ? "statusFilePath is not set"
                    : ShimSettings.GATES_PROXY_STATUS + "=false")
                + ")");
  }

  @Override
  public void start(ProxyService service) {
    if (settings.gatewayMode() == ShimSettings.GatewayMode.SIDECAR) {
      startWatchingSidecar();
    } else {
      startGateway();
    }
  }

  /** Watches the sidecar's socket; waits (amqpGatewayStartTimeoutMs at most) for it to answer. */
  void startWatchingSidecar() {
    sidecar = new SidecarWatch(socket, readinessProbe(), statusFile);
    sidecar.start();
    if (!sidecar.awaitReady(settings.startTimeoutMs())) {
      LOG.warn(
          "the gateway container does not answer at {} after {} ms; the proxy starts anyway, and "
              + "AMQP connections are closed at once until it does",
          socket,
          settings.startTimeoutMs());
    }
  }

  /** Launches the gateway and waits (amqpGatewayStartTimeoutMs at most) until it is ready. */
  void startGateway() {
    List<String> command =
        GatewaySupervisor.commandLine(settings.command(), configFile.toString(), settings.logLevel());
    supervisor =
        new GatewaySupervisor(command, readinessProbe(), settings.stopTimeoutMs(), settings.restartMaxDelayMs());
    // ProxyService.close() never calls close() (Pulsar 4.0.8), not even on SIGTERM: without
    // this hook the gateway would outlive the proxy.
    shutdownHook = new Thread(this::stopGateway, "starlight-rabbitmq-shutdown");
    Runtime.getRuntime().addShutdownHook(shutdownHook);
    supervisor.start();
    try {
      supervisor.awaitFirstStart(settings.startTimeoutMs());
    } catch (ShimConfigException e) {
      LOG.error("Starlight for RabbitMQ cannot start: {}", e.getMessage());
      stopGateway();
      throw new IllegalStateException(e.getMessage());
    } catch (TimeoutException e) {
      LOG.warn(
          "the gateway is not ready after {} ms; the proxy starts anyway and the gateway stays supervised",
          settings.startTimeoutMs());
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
  }

  @Override
  public Map<InetSocketAddress, ChannelInitializer<SocketChannel>> newChannelInitializers() {
    Map<InetSocketAddress, ChannelInitializer<SocketChannel>> initializers = new LinkedHashMap<>();
    if (settings.mode() == ShimSettings.Mode.RELAY) {
      relay =
          new Relay(
              socket,
              settings.gatewayMode() == ShimSettings.GatewayMode.SIDECAR
                  ? "the gateway container is not running or not ready yet"
                  : "it is starting or being restarted");
      for (AmqpListener listener : settings.listeners()) {
        initializers.put(listener.address(), relay);
      }
    }
    return initializers;
  }

  /** Sidecar mode: whether the gateway container answered the last probe. */
  boolean sidecarReady() {
    return sidecar != null && sidecar.ready();
  }

  @Override
  public void close() {
    if (shutdownHook != null) {
      try {
        Runtime.getRuntime().removeShutdownHook(shutdownHook);
      } catch (IllegalStateException alreadyShuttingDown) {
        // the hook runs anyway
      }
    }
    stopGateway();
  }

  /** The running gateway's process id, -1 if none (for tests and diagnostics). */
  long gatewayPid() {
    return supervisor == null ? -1 : supervisor.pid();
  }

  private synchronized void stopGateway() {
    if (supervisor != null) {
      supervisor.stop();
    }
    if (sidecar != null) {
      sidecar.stop(); // the sidecar gateway itself is its container's to stop
    }
    if (relay != null) {
      relay.close();
    }
    cleanUpWorkDirectory();
  }

  private BooleanSupplier readinessProbe() {
    if (settings.mode() == ShimSettings.Mode.RELAY) {
      // The gateway listens on its socket only once it has loaded every vhost (and, as a
      // sidecar, stops listening when it drains). The probe says
      // PROXY LOCAL (a health check), which the gateway logs at DEBUG only.
      return () -> {
        try (java.nio.channels.SocketChannel probe =
            java.nio.channels.SocketChannel.open(StandardProtocolFamily.UNIX)) {
          probe.connect(UnixDomainSocketAddress.of(socket));
          probe.write(ByteBuffer.wrap(ProxyProtocolV2.local()));
          return true;
        } catch (IOException notYet) {
          return false;
        }
      };
    }
    AmqpListener first = settings.listeners().get(0);
    return () -> {
      try (Socket probe = new Socket()) {
        probe.connect(new InetSocketAddress(probeHost(first.host()), first.port()), 1_000);
        return true;
      } catch (IOException notYet) {
        return false;
      }
    };
  }

  private static String probeHost(String host) {
    return host.equals("0.0.0.0") || host.equals("::") ? "127.0.0.1" : host;
  }

  /** The command must exist before the proxy starts: one line, not a restart loop. */
  static void checkCommand(List<String> command) throws ShimConfigException {
    String program = command.get(0);
    if (program.contains(File.separator)) {
      if (!Files.isExecutable(Path.of(program))) {
        throw new ShimConfigException(
            ShimSettings.COMMAND + ": '" + program + "' does not exist or is not executable");
      }
      return;
    }
    String path = System.getenv().getOrDefault("PATH", "");
    for (String directory : path.split(File.pathSeparator)) {
      if (!directory.isEmpty() && Files.isExecutable(Path.of(directory, program))) {
        return;
      }
    }
    throw new ShimConfigException(
        ShimSettings.COMMAND
            + ": '"
            + program
            + "' is not on the proxy's PATH; install the gateway (its wheel) or set "
            + ShimSettings.COMMAND
            + " to its full path, or run it in a container of its own with "
            + ShimSettings.GATEWAY_MODE
            + "=sidecar (an image without Python, e.g. apachepulsar/pulsar-all)");
  }

  /** A taken port is reported here, in one line, rather than by a bind failure later. */
  static void checkBindable(AmqpListener listener) throws ShimConfigException {
    try (ServerSocket probe = new ServerSocket()) {
      probe.setReuseAddress(true);
      probe.bind(new InetSocketAddress(InetAddress.getByName(listener.host()), listener.port()));
    } catch (IOException e) {
      throw new ShimConfigException(
          "amqpListeners: cannot listen on " + listener.url() + ": " + e.getMessage());
    }
  }

  private void createWorkDirectory() throws ShimConfigException {
    try {
      if (settings.workDirectory() != null) {
        workDirectory = settings.workDirectory();
        Files.createDirectories(workDirectory);
        ownWorkDirectory = false;
      } else {
        // Private (0700): the socket inside is trusted for PROXY headers.
        workDirectory = Files.createTempDirectory("starlight-rabbitmq-");
        ownWorkDirectory = true;
      }
    } catch (IOException e) {
      throw new ShimConfigException(
          ShimSettings.WORK_DIRECTORY + ": cannot create " + e.getMessage());
    }
    int socketPathLength = workDirectory.resolve("amqp.sock").toString().getBytes(StandardCharsets.UTF_8).length;
    if (socketPathLength > 107) {
      throw new ShimConfigException(
          ShimSettings.WORK_DIRECTORY + ": '" + workDirectory + "' is too long for a Unix socket path (107 bytes at most)");
    }
  }

  private void cleanUpWorkDirectory() {
    if (workDirectory == null) {
      return;
    }
    try {
      if (ownWorkDirectory) {
        try (Stream<Path> files = Files.walk(workDirectory)) {
          for (Path file : files.sorted(Comparator.reverseOrder()).toList()) {
            Files.deleteIfExists(file);
          }
        }
      } else if (configFile != null) {
        Files.deleteIfExists(configFile);
      }
    } catch (IOException e) {
      LOG.debug("could not clean up {}: {}", workDirectory, e.toString());
    }
  }
}
