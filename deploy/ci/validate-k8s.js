#!/usr/bin/env node
// Validates Kubernetes objects against the OpenAPI schemas shipped in the npm packages
// kubernetes-models and @kubernetes-models/prometheus-operator.
// Usage: node validate-k8s.js NODE_MODULES_DIR FILE.json...  (each file: a JSON array of objects,
// written by deploy/ci/yaml2json.py from the rendered manifests).
'use strict';
const fs = require('fs');
const path = require('path');

const [modules, ...files] = process.argv.slice(2);
const load = (name) => require(path.join(path.resolve(modules), name));
const core = load('kubernetes-models');
const promOp = load('@kubernetes-models/prometheus-operator');

// apiVersion -> module exporting the kinds of that group/version.
function groupModule(apiVersion) {
  if (apiVersion.startsWith('monitoring.coreos.com/')) {
    return promOp[apiVersion.split('/')[1]] ? promOp : load('@kubernetes-models/prometheus-operator/' + apiVersion);
  }
  const rel = apiVersion.includes('/') ? apiVersion : apiVersion;  // "v1" or "apps/v1"
  return load('kubernetes-models/' + rel);
}

let failures = 0;
let count = 0;
for (const file of files) {
  const objects = JSON.parse(fs.readFileSync(file, 'utf8'));
  for (const obj of objects) {
    const where = `${file}: ${obj.kind}/${obj.metadata && obj.metadata.name}`;
    let Kind;
    try {
      Kind = groupModule(obj.apiVersion)[obj.kind];
    } catch (e) {
      Kind = undefined;
    }
    if (!Kind) {
      console.error(`${where}: no schema for ${obj.apiVersion} ${obj.kind}`);
      failures++;
      continue;
    }
    try {
      new Kind(obj).validate();
      count++;
    } catch (e) {
      console.error(`${where}: ${e.message}`);
      failures++;
    }
  }
}
console.log(`validate-k8s: ${count} objects valid, ${failures} failures`);
process.exit(failures ? 1 : 0);
