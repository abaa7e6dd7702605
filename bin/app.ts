// The CDK app: the stack for the configured stage, with cdk-nag's AWS Solutions checks on every resource.
import { App, Aspects } from 'aws-cdk-lib';
import { AwsSolutionsChecks } from 'cdk-nag';
import { CONFIG_CONTEXT_KEY, parseStackConfig, stackNameForStage } from '../lib/config.ts';
import { DsrStack } from '../lib/dsr-stack.ts';

const app = new App();
// The stage names the stack, so stages deploy side by side in one account: svc-dsr-dev, svc-dsr-prod.
const config = parseStackConfig(app.node.tryGetContext(CONFIG_CONTEXT_KEY));
new DsrStack(app, stackNameForStage(config.stage), {
  config,
  description: `svc-dsr (${config.stage}): GDPR and CCPA data-subject requests for the svc comment platform`,
});
// Every finding is either fixed or acknowledged on its own resource with a reason; an
// unacknowledged one fails synth.
Aspects.of(app).add(new AwsSolutionsChecks({ reports: false }));
