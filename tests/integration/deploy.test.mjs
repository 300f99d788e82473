// What deploy/ ships: the systemd unit passes systemd-analyze verify, and cabind starts on the
// sample configuration and serves with what it says.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { test } from 'node:test';

import YAML from 'yaml';

import { BIN_DIR, removeServerDirs, removeTree, startCabind } from './helpers.mjs';

const UNIT = fs.readFileSync('deploy/cabind.service', 'utf8');

test('the systemd unit passes systemd-analyze verify, and keeps sandboxes out of its kill', async () => {
  // verify checks that ExecStart names an executable: this build's, in a copy of the unit.
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cabin-unit-'));
  try {
    const unit = path.join(dir, 'cabind.service');
    fs.writeFileSync(unit, UNIT.replace('/opt/cabin/bin/cabind', path.join(BIN_DIR, 'cabind')));
    const r = spawnSync('systemd-analyze', ['verify', unit], { encoding: 'utf8' });
    assert.equal(r.status, 0, r.stdout + r.stderr);
    assert.doesNotMatch(r.stderr, /cabind\.service:/, r.stderr);
  } finally {
    await removeTree(dir);
  }
  assert.match(UNIT, /^KillMode=process$/m);
  assert.match(UNIT, /^RuntimeDirectoryPreserve=yes$/m);
  assert.match(UNIT, /^ExecStart=\/opt\/cabin\/bin\/cabind --config \/etc\/cabin\/cabind\.toml$/m);
});

test('cabind starts on the sample configuration and serves what it says', async () => {
  const server = await startCabind({ args: ['--config', 'deploy/cabind.toml'] });
  try {
    const ready = await fetch(`${server.base}/readyz`);
    assert.equal(ready.status, 200);
    const info = await server.api('GET', '/v1/info');
    assert.equal(info.status, 200, info.text);
    assert.equal(info.json.limits.default_idle_timeout_s, 300);
    assert.equal(info.json.sessions.max, 16);
    assert.equal(info.json.default_driver, 'namespace');
  } finally {
    await server.stop();
    await removeServerDirs(server);
  }
});

test('the Kubernetes manifests render with kustomize and validate against the Kubernetes schemas', async () => {
  // The secret files an operator writes first; here throwaway ones in a copy.
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cabin-k8s-'));
  try {
    fs.cpSync('deploy/kubernetes', dir, { recursive: true });
    fs.writeFileSync(path.join(dir, 'api-key'), 'a'.repeat(64));
    fs.writeFileSync(path.join(dir, 'token-k0000000001.key'), 'b'.repeat(64));
    fs.writeFileSync(path.join(dir, 'tenants.json'), '{"keys": []}');
    const r = spawnSync('kubectl', ['kustomize', dir], { encoding: 'utf8' });
    assert.ok(!r.error, `kubectl (with its kustomize) renders deploy/kubernetes: ${r.error?.message}`);
    assert.equal(r.status, 0, r.stderr);
    const objects = YAML.parseAllDocuments(r.stdout).map((d) => d.toJSON()).filter(Boolean);
    const kinds = objects.map((o) => `${o.kind}/${o.metadata.name}`).sort();
    assert.deepEqual(kinds, [
      'ConfigMap/' + objects.find((o) => o.kind === 'ConfigMap').metadata.name,
      'Deployment/cabin-gateway', 'Namespace/cabin', 'PodDisruptionBudget/cabin-gateway',
      'PodDisruptionBudget/cabind',
      ...objects.filter((o) => o.kind === 'Secret').map((o) => `Secret/${o.metadata.name}`).sort(),
      'Service/cabin', 'Service/cabind', 'StatefulSet/cabind',
    ]);
    const models = {
      ConfigMap: (await import('kubernetes-models/v1/ConfigMap')).ConfigMap,
      Secret: (await import('kubernetes-models/v1/Secret')).Secret,
      Service: (await import('kubernetes-models/v1/Service')).Service,
      Namespace: (await import('kubernetes-models/v1/Namespace')).Namespace,
      Deployment: (await import('kubernetes-models/apps/v1/Deployment')).Deployment,
      StatefulSet: (await import('kubernetes-models/apps/v1/StatefulSet')).StatefulSet,
      PodDisruptionBudget: (await import('kubernetes-models/policy/v1/PodDisruptionBudget'))
        .PodDisruptionBudget,
    };
    for (const o of objects) {
      assert.ok(models[o.kind], `no schema for ${o.kind}`);
      // kustomize wraps base64 at 70 columns; the API server's decoder skips the newlines, the
      // schema's format check does not.
      if (o.kind === 'Secret') {
        for (const k of Object.keys(o.data)) o.data[k] = o.data[k].replace(/\s+/g, '');
      }
      assert.doesNotThrow(() => new models[o.kind](o).validate(), `${o.kind}/${o.metadata.name}`);
      if (o.kind !== 'Namespace') assert.equal(o.metadata.namespace, 'cabin');
    }
    // The validator catches a broken object (so the loop above can fail).
    const broken = structuredClone(objects.find((o) => o.kind === 'StatefulSet'));
    broken.spec.replicas = 'three';
    assert.throws(() => new models.StatefulSet(broken).validate());

    // What the topology depends on.
    const headless = objects.find((o) => o.kind === 'Service' && o.metadata.name === 'cabind');
    assert.equal(headless.spec.clusterIP, 'None');
    assert.equal(headless.spec.publishNotReadyAddresses, true);
    const nodes = objects.find((o) => o.kind === 'StatefulSet').spec.template.spec;
    const cabind = nodes.containers[0];
    assert.ok(cabind.args.includes('--node-id=n$(POD_INDEX)'));
    assert.ok(cabind.args.includes('--on-shutdown=keep'));
    // Sessions outlive the node's container (restart adoption): its sandboxes are processes of
    // the host's pid namespace, in cgroups of the host's hierarchy, their state on the host.
    assert.equal(nodes.hostPID, true);
    const hostPathOf = (mountPath) => {
      const m = cabind.volumeMounts.find((v) => v.mountPath === mountPath);
      return m && nodes.volumes.find((v) => v.name === m.name).hostPath?.path;
    };
    const cgroupRoot = cabind.args.find((a) => a.startsWith('--cgroup-root=')).split('=')[1];
    assert.equal(hostPathOf(cgroupRoot), '/sys/fs/cgroup');
    assert.equal(hostPathOf('/var/lib/cabin'), '/var/lib/cabin');
    assert.equal(hostPathOf('/run/cabin'), '/run/cabin');
    assert.ok(cabind.args.includes('--tenant-keys-file=/etc/cabin/tenants/tenants.json'));
    assert.ok(nodes.volumes.find((v) => v.name === 'tenant-keys').secret.secretName
      .startsWith('cabin-tenant-keys'));
    assert.equal(cabind.readinessProbe.httpGet.path, '/readyz');
    assert.equal(cabind.livenessProbe.httpGet.path, '/healthz');
    const gw = objects.find((o) => o.kind === 'Deployment').spec.template.spec;
    assert.equal(gw.containers[0].securityContext.readOnlyRootFilesystem, true);
    assert.deepEqual(gw.containers[0].securityContext.capabilities.drop, ['ALL']);
    assert.equal(gw.securityContext.runAsNonRoot, true);
    assert.ok(gw.containers[0].args.includes('--nodes-dns=cabind.cabin.svc.cluster.local'));
    // Both read the same admin key; the nodes share the signing keys.
    const keySecret = objects.find((o) => o.kind === 'Secret' && o.metadata.name.startsWith('cabin-api-key'));
    assert.equal(Buffer.from(keySecret.data.key, 'base64').toString(), 'a'.repeat(64));
    assert.equal(cabind.env.find((e) => e.name === 'CABIN_API_KEY').valueFrom.secretKeyRef.name,
                 keySecret.metadata.name);
    assert.equal(gw.volumes.find((v) => v.name === 'api-key').secret.secretName, keySecret.metadata.name);

    // Without the secret files it does not render: no default key ships.
    fs.rmSync(path.join(dir, 'api-key'));
    assert.notEqual(spawnSync('kubectl', ['kustomize', dir], { encoding: 'utf8' }).status, 0);
  } finally {
    await removeTree(dir);
  }
});
