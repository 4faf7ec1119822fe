// Preloaded (`node --require`) into amqplib's own test suite by tests/support/client_suites.py.
//
// Many of amqplib's tests connect to `amqp://localhost` (port 5672) with no setting to point
// them elsewhere, and one to `amqp://[::1]`. This sends exactly those connections, port 5672
// on the local host, to the gateway under test (STARLIGHT_AMQP_TARGET, host:port for IPv4 and
// `localhost`; STARLIGHT_AMQP_TARGET_IPV6, [host]:port for ::1). Every other connection is left
// alone: the suite's tests of a refused or timed-out connection use other ports on purpose.
// Only the connection target changes; no test is touched.
'use strict';

const net = require('node:net');

function parse(value, name) {
  const match = /^\[?([^\]]+)\]?:(\d+)$/.exec(value || '');
  if (!match) throw new Error(`${name} must be host:port, got ${JSON.stringify(value)}`);
  return { host: match[1], port: Number(match[2]) };
}

const ipv4 = parse(process.env.STARLIGHT_AMQP_TARGET, 'STARLIGHT_AMQP_TARGET');
const ipv6 = parse(process.env.STARLIGHT_AMQP_TARGET_IPV6, 'STARLIGHT_AMQP_TARGET_IPV6');
const AMQP_PORT = 5672;

function target(options) {
  if (typeof options !== 'object' || options === null || Number(options.port) !== AMQP_PORT) {
    return options;
  }
  const host = options.host === undefined ? 'localhost' : options.host;
  if (host === 'localhost' || host === '127.0.0.1') return { ...options, ...ipv4 };
  if (host === '::1') return { ...options, ...ipv6 };
  return options;
}

// amqplib opens its sockets with net.connect(options, callback) (lib/connect.js), looked up
// on the module at call time, so replacing the export is enough.
const original = net.connect;
function connect(options, ...rest) {
  return original.call(this, target(options), ...rest);
}
net.connect = connect;
net.createConnection = connect;
