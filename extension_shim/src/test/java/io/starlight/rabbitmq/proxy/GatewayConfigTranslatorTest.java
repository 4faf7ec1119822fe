package io.starlight.rabbitmq.proxy;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.StringReader;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import org.junit.jupiter.api.Test;

/** proxy.conf to the gateway's configuration, and the extension's own keys. */
class GatewayConfigTranslatorTest {
  private static final Path SOCKET = Path.of("/tmp/starlight-rabbitmq-1/amqp.sock");
  private static final Set<String> KEYS = GatewayConfigTranslator.gatewayKeys();

  /** The reference's quick start plus what a proxy.conf has anyway. */
  private static final String QUICK_START =
      String.join(
          "\n",
          "brokerServiceURL=pulsar://127.0.0.1:6650",
          "brokerWebServiceURL=http://127.0.0.1:8080",
          "configurationStoreServers=127.0.0.1:2181",
          "servicePort=6651",
          "webServicePort=8089",
          "clusterName=standalone",
          "proxyExtensions=rabbitmq",
          "proxyExtensionsDirectory=./proxyextensions",
          "amqpListeners=amqp://127.0.0.1:5672",
          "advertisedAddress=127.0.0.1",
          "");

  private static Properties conf(String text) throws Exception {
    Properties properties = new Properties();
    properties.load(new StringReader(text));
    return properties;
  }

  private static Map<String, String> translate(String text) throws Exception {
    Properties proxy = conf(text);
    return GatewayConfigTranslator.translate(proxy, ShimSettings.from(proxy), KEYS, SOCKET);
  }

  @Test
  void theKeyListIsTheGatewaysAndHoldsNoShimKey() {
    assertTrue(KEYS.containsAll(List.of("configurationStoreServers", "amqpListeners", "brokerServiceURL",
        "tokenSecretKey", "amqpProxyProtocolTrustedNetworks")));
    for (String key : ShimSettings.KEYS) {
      assertFalse(KEYS.contains(key), key);
    }
  }

  @Test
  void relayModeKeepsGatewayKeysOnlyAndListensOnTheSocket() throws Exception {
    Map<String, String> out = translate(QUICK_START + "amqpSessionCountLimit=64\namqpProxyMode=relay\n");
    assertEquals("pulsar://127.0.0.1:6650", out.get("brokerServiceURL"));
    assertEquals("http://127.0.0.1:8080", out.get("brokerWebServiceURL"));
    assertEquals("127.0.0.1:2181", out.get("configurationStoreServers"));
    assertEquals("127.0.0.1", out.get("advertisedAddress"));
    assertEquals("64", out.get("amqpSessionCountLimit"));
    assertEquals("amqp+unix://" + SOCKET, out.get("amqpListeners"));
    assertEquals("unix", out.get("amqpProxyProtocolTrustedNetworks"));
    for (String key : out.keySet()) {
      assertTrue(KEYS.contains(key), key);
    }
    assertFalse(out.containsKey("servicePort"));
    assertFalse(out.containsKey("proxyExtensions"));
    assertFalse(out.containsKey("amqpProxyMode"));
  }

  @Test
  void directModePassesTheListenersAndTrust() throws Exception {
    Map<String, String> out =
        translate(QUICK_START.replace("amqp://127.0.0.1:5672", "amqp://0.0.0.0:5673")
            + "amqpProxyMode=direct\namqpProxyProtocolTrustedNetworks=10.0.0.0/8\n");
    assertEquals("amqp://0.0.0.0:5673", out.get("amqpListeners"));
    assertEquals("10.0.0.0/8", out.get("amqpProxyProtocolTrustedNetworks"));
  }

  @Test
  void brokerTlsAndAuthenticationComeFromTheProxysOwnKeys() throws Exception {
    Map<String, String> out =
        translate(
            QUICK_START
                + "tlsEnabledWithBroker=true\n"
                + "brokerServiceURLTLS=pulsar+ssl://broker:6651\n"
                + "brokerWebServiceURLTLS=https://broker:8443\n"
                + "brokerClientTrustCertsFilePath=/etc/pulsar/ca.pem\n"
                + "brokerClientAuthenticationPlugin=org.apache.pulsar.client.impl.auth.AuthenticationToken\n"
                + "brokerClientAuthenticationParameters=file:///etc/pulsar/proxy.token\n"
                + "authenticationEnabled=true\n"
                + "tokenSecretKey=file:///etc/pulsar/secret.key\n");
    assertEquals("pulsar+ssl://broker:6651", out.get("brokerServiceURL"));
    assertEquals("https://broker:8443", out.get("brokerWebServiceURL"));
    assertEquals("true", out.get("tlsEnabledWithBroker"));
    assertEquals("/etc/pulsar/ca.pem", out.get("brokerClientTrustCertsFilePath"));
    assertEquals(
        "org.apache.pulsar.client.impl.auth.AuthenticationToken", out.get("brokerClientAuthenticationPlugin"));
    assertEquals("file:///etc/pulsar/proxy.token", out.get("brokerClientAuthenticationParameters"));
    assertEquals("true", out.get("authenticationEnabled"));
    assertEquals("file:///etc/pulsar/secret.key", out.get("tokenSecretKey"));
  }

  private static final String PROXY_TLS =
      "tlsEnabledWithKeyStore=true\ntlsKeyStoreType=JKS\ntlsKeyStore=/etc/pulsar/proxy.jks\n"
          + "tlsKeyStorePassword=secret\ntlsProtocols=TLSv1.3\ntlsHostnameVerificationEnabled=true\n";

  @Test
  void relayModeLeavesTheProxysOwnListenerTlsToTheProxy() throws Exception {
    Map<String, String> out = translate(QUICK_START + PROXY_TLS);
    for (String key : GatewayConfigTranslator.LISTENER_TLS_KEYS) {
      assertTrue(KEYS.contains(key), key);
      assertFalse(out.containsKey(key), key);
    }
    // ... but what concerns the gateway's connection to the brokers stays.
    assertEquals("true", out.get("tlsHostnameVerificationEnabled"));
  }

  @Test
  void directModePassesListenerTlsToTheGatewayWhichServesIt() throws Exception {
    Map<String, String> out = translate(QUICK_START + PROXY_TLS + "amqpProxyMode=direct\n");
    assertEquals("JKS", out.get("tlsKeyStoreType")); // the gateway then names what to convert
    assertEquals("/etc/pulsar/proxy.jks", out.get("tlsKeyStore"));
  }

  @Test
  void pulsarsDisabledAuthenticationPluginMeansNone() throws Exception {
    Map<String, String> out =
        translate(QUICK_START + "brokerClientAuthenticationPlugin=org.apache.pulsar.client.impl.auth.AuthenticationDisabled\n");
    assertFalse(out.containsKey("brokerClientAuthenticationPlugin"));
  }

  @Test
  void theNewerMetadataStoreNameIsAccepted() throws Exception {
    Map<String, String> out =
        translate(QUICK_START.replace("configurationStoreServers=", "configurationMetadataStoreUrl=zk:"));
    assertEquals("zk:127.0.0.1:2181", out.get("configurationStoreServers"));
  }

  @Test
  void missingKeysAreNamed() {
    ShimConfigException broker =
        assertThrows(ShimConfigException.class, () -> translate(QUICK_START.replace("brokerServiceURL=", "x=")));
    assertTrue(broker.getMessage().startsWith("brokerServiceURL: not set in proxy.conf"), broker.getMessage());
    ShimConfigException zk =
        assertThrows(
            ShimConfigException.class, () -> translate(QUICK_START.replace("configurationStoreServers=", "x=")));
    assertTrue(zk.getMessage().startsWith("configurationStoreServers: not set"), zk.getMessage());
  }

  @Test
  void valuesTheGatewayWouldReadDifferentlyAreRefused() throws Exception {
    Properties proxy = conf(QUICK_START);
    proxy.setProperty("tokenAudience", "a\nb");
    ShimConfigException e =
        assertThrows(
            ShimConfigException.class,
            () -> GatewayConfigTranslator.translate(proxy, ShimSettings.from(proxy), KEYS, SOCKET));
    assertTrue(e.getMessage().startsWith("tokenAudience: a value spanning lines"), e.getMessage());
  }

  @Test
  void renderedFileIsOneKeyPerLine() {
    String text = GatewayConfigTranslator.render(Map.of("brokerServiceURL", "pulsar://h:6650"));
    assertTrue(text.startsWith("# Written by"));
    assertTrue(text.endsWith("\nbrokerServiceURL=pulsar://h:6650\n"));
  }

  @Test
  void shimSettings() throws Exception {
    ShimSettings defaults = ShimSettings.from(conf(QUICK_START));
    assertEquals(ShimSettings.Mode.RELAY, defaults.mode());
    assertEquals(List.of("starlight-rabbitmq"), defaults.command());
    assertEquals(List.of(new AmqpListener("amqp", "127.0.0.1", 5672)), defaults.listeners());
    ShimSettings custom =
        ShimSettings.from(
            conf(QUICK_START + "amqpGatewayCommand=/opt/venv/bin/python  -m gateway.cli\namqpProxyMode=DIRECT\n"));
    assertEquals(List.of("/opt/venv/bin/python", "-m", "gateway.cli"), custom.command());
    assertEquals(ShimSettings.Mode.DIRECT, custom.mode());
  }

  @Test
  void badShimSettingsAreNamed() {
    assertMessage("amqpProxyMode: must be relay or direct", QUICK_START + "amqpProxyMode=sideways\n");
    assertMessage("amqpListeners: listener 'http://h:1' is not of the form", QUICK_START.replace("amqp://127.0.0.1:5672", "http://h:1"));
    assertMessage("amqpListeners: listener 'amqp://h:70000' has port 70000", QUICK_START.replace("amqp://127.0.0.1:5672", "amqp://h:70000"));
    assertMessage("amqpListeners: amqps://127.0.0.1:5671 is TLS", QUICK_START.replace("amqp://127.0.0.1:5672", "amqps://127.0.0.1"));
    assertMessage("amqpGatewayStartTimeoutMs: must be a positive number", QUICK_START + "amqpGatewayStartTimeoutMs=soon\n");
    assertMessage("amqpGatewayCommand: is empty", QUICK_START + "amqpGatewayCommand=\n");
  }

  @Test
  void sidecarModeSettings() throws Exception {
    assertEquals(ShimSettings.GatewayMode.CHILD, ShimSettings.from(conf(QUICK_START)).gatewayMode());
    ShimSettings sidecar =
        ShimSettings.from(
            conf(QUICK_START + "amqpGatewayMode=Sidecar\namqpGatewayWorkDirectory=/starlight-rabbitmq\n"));
    assertEquals(ShimSettings.GatewayMode.SIDECAR, sidecar.gatewayMode());
    assertEquals(Path.of("/starlight-rabbitmq"), sidecar.workDirectory());
    assertTrue(sidecar.gatewayGatesProxyStatus());
    String base = QUICK_START + "amqpGatewayMode=sidecar\namqpGatewayWorkDirectory=/s\n";
    assertFalse(ShimSettings.from(conf(base + "amqpGatewayGatesProxyStatus=false\n")).gatewayGatesProxyStatus());
  }

  @Test
  void badSidecarSettingsAndUnknownKeysAreNamed() {
    assertMessage("amqpGatewayMode: must be child or sidecar, got 'pod'", QUICK_START + "amqpGatewayMode=pod\n");
    assertMessage(
        "amqpGatewayWorkDirectory: must name the directory shared with the gateway's container",
        QUICK_START + "amqpGatewayMode=sidecar\n");
    String sidecar = QUICK_START + "amqpGatewayMode=sidecar\namqpGatewayWorkDirectory=/s\n";
    assertMessage("amqpProxyMode: must be relay with amqpGatewayMode=sidecar", sidecar + "amqpProxyMode=direct\n");
    assertMessage(
        "amqpGatewayCommand: applies to amqpGatewayMode=child only",
        sidecar + "amqpGatewayCommand=/opt/venv/bin/starlight-rabbitmq\n");
    assertMessage("amqpGatewayGatesProxyStatus: must be true or false", sidecar + "amqpGatewayGatesProxyStatus=yes\n");
    // A misspelt key of the extension would otherwise be ignored (and a child run instead).
    assertMessage(
        "amqpGatewayMod: not a key of the Starlight for RabbitMQ extension (its keys: amqpProxyMode, amqpGatewayMode,",
        QUICK_START + "amqpGatewayMod=sidecar\n");
    assertMessage("amqpProxyModes: not a key", QUICK_START + "amqpProxyModes=relay\n");
  }

  @Test
  void relayModeRefusesAnOpenGatewayOtherMachinesReachUnlessAllowed() throws Exception {
    String open = QUICK_START.replace("amqp://127.0.0.1:5672", "amqp://0.0.0.0:5672");
    ShimConfigException refused = assertThrows(ShimConfigException.class, () -> translate(open));
    assertEquals(
        "amqpListeners: amqp://0.0.0.0:5672 is reachable from other machines and authenticationEnabled "
            + "is false, which lets anyone in with any credentials: set authenticationEnabled=true, listen "
            + "on 127.0.0.1 only, or set amqpAllowUnauthenticatedRemote=true",
        refused.getMessage());
    Map<String, String> allowed = translate(open + "amqpAllowUnauthenticatedRemote=true\n");
    assertEquals("true", allowed.get("amqpAllowUnauthenticatedRemote"));
    assertEquals(
        List.of(AmqpListener.parse("amqp://0.0.0.0:5672")),
        GatewayConfigTranslator.openRemoteListeners(allowed, ShimSettings.from(conf(open)).listeners()));
    Map<String, String> authenticated =
        translate(open + "authenticationEnabled=true\ntokenSecretKey=data:;base64,eA==\n");
    assertTrue(
        GatewayConfigTranslator.openRemoteListeners(authenticated, ShimSettings.from(conf(open)).listeners())
            .isEmpty());
    for (String local : List.of("amqp://127.0.0.2:5672", "amqp://localhost:5672", "amqp://[::1]:5672")) {
      translate(QUICK_START.replace("amqp://127.0.0.1:5672", local));
    }
    assertTrue(AmqpListener.parse("amqp://[::ffff:127.0.0.1]:5672").local());
    // A name is not resolved to decide: only localhost counts as loopback.
    assertFalse(AmqpListener.parse("amqp://gateway.example.com:5672").local());
    assertFalse(AmqpListener.parse("amqp://[::]:5672").local());
  }

  @Test
  void ipv6Listeners() throws Exception {
    assertEquals(new AmqpListener("amqp", "::1", 5672), AmqpListener.parse("amqp://[::1]"));
    assertEquals("amqp://[::1]:5672", AmqpListener.parse("amqp://[::1]").url());
  }

  private static void assertMessage(String prefix, String text) {
    ShimConfigException e = assertThrows(ShimConfigException.class, () -> ShimSettings.from(conf(text)));
    assertTrue(e.getMessage().startsWith(prefix), e.getMessage());
  }
}
