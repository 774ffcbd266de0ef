"""kafkajs (npm, a pure JavaScript Kafka client) on the machine's Node.js against the
Kafka listener: produce N keyed messages with headers, consume them in a group.

kafkajs is installed with npm into this test's tmp dir (never into the repository),
pinned to one version; scripts/install-system-deps.sh provides node and npm, and
without them, or when npm cannot install kafkajs, the test fails saying so."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.integration

KAFKAJS = "kafkajs@2.2.4"
N = 300

SCRIPT = r"""
const { Kafka, logLevel } = require('kafkajs');
const [bootstrap, topic, n] = process.argv.slice(2);
const total = Number(n);
const kafka = new Kafka({ clientId: 'kafkajs-test', brokers: bootstrap.split(','),
                          logLevel: logLevel.ERROR });
(async () => {
  const producer = kafka.producer();
  await producer.connect();
  for (let p = 0; p < 2; p++) {
    const messages = [];
    for (let i = p; i < total; i += 2)
      messages.push({ key: `k${i % 5}`, value: `v${i}`, partition: p, headers: { h: `${i}` } });
    await producer.send({ topic, acks: -1, messages });
  }
  await producer.disconnect();
  const consumer = kafka.consumer({ groupId: 'js-group' });
  await consumer.connect();
  await consumer.subscribe({ topic, fromBeginning: true });
  let seen = 0;
  await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`only ${seen} of ${total} consumed`)), 60000);
    consumer.run({ eachMessage: async ({ partition, message }) => {
      console.log(JSON.stringify({ partition, offset: message.offset,
        key: message.key.toString(), value: message.value.toString(),
        h: message.headers.h.toString() }));
      if (++seen === total) { clearTimeout(timer); resolve(); }
    } }).catch(reject);
  });
  await consumer.disconnect();
})().catch((e) => { console.error(e); process.exit(1); });
"""


def _tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.fail(
            f"{name} is not installed: run scripts/install-system-deps.sh as root (it installs Node.js and npm)"
        )
    return path


def test_kafkajs_produces_and_consumes_n_in_a_group(kafka_cluster: Any, tmp_path: Path) -> None:
    node, npm = _tool("node"), _tool("npm")
    app = tmp_path / "kafkajs-app"
    app.mkdir()
    install = subprocess.run(
        [npm, "install", "--no-audit", "--no-fund", "--prefer-offline", KAFKAJS],
        cwd=app,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert install.returncode == 0, f"npm install {KAFKAJS} failed: {install.stderr}"
    (app / "run.js").write_text(SCRIPT)
    cluster = kafka_cluster(1)
    cluster.create_topic("js", 2)
    result = subprocess.run(
        [node, "run.js", cluster.bootstrap, "js", str(N)], cwd=app, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, f"kafkajs failed: {result.stderr}"
    got = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    assert len(got) == N
    for p in range(2):
        mine = [m for m in got if m["partition"] == p]
        values = [int(m["value"][1:]) for m in mine]
        assert values == [i for i in range(N) if i % 2 == p], f"partition {p} out of order"
        assert all(m["key"] == f"k{int(m['value'][1:]) % 5}" and m["h"] == m["value"][1:] for m in mine)
        offsets = [int(m["offset"]) for m in mine]
        assert offsets == list(range(len(values)))  # message offsets
