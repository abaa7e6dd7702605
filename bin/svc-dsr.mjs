#!/usr/bin/env node
// Launcher: loads the TypeScript CLI through tsx so a fresh clone runs without a build step.
import { register } from 'tsx/esm/api';

process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED ??= 'true';
register();
await import('./svc-dsr.ts');
