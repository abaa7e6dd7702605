import { App } from 'aws-cdk-lib';
import { DsrStack } from './lib/dsr-stack.ts';
import { environmentBudgets } from './lib/environment-budget.ts';
import { productionConfig } from './test/infra/fixtures.ts';
const app = new App({ context: { 'aws:cdk:bundling-stacks': [] } });
const stack = new DsrStack(app, 'svc-dsr-prod', { config: productionConfig });
for (const b of environmentBudgets(stack)) console.log(b.path, b.bytes, JSON.stringify(b.largest.slice(0,4)));
