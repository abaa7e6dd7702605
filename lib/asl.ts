/**
 * The state machine of a synthesized CloudFormation template as plain ASL. CDK writes the definition
 * as an `Fn::Join` of JSON fragments and intrinsic tokens (the Lambda ARNs, the partition); this
 * resolves them to stable stand-in values of one account and remembers which ARN stands for which
 * Lambda. The infra tests read the workflow through it, and local mode runs it, handing each Task
 * to the right in-process handler.
 */
import { z } from 'zod';
import { ConfigurationError } from '../lambdas/shared/errors.ts';

/** The fake environment the resolved definition claims to live in. */
export const LOCAL_PARTITION = 'aws';
export const LOCAL_REGION = 'us-east-1';
export const LOCAL_ACCOUNT_ID = '000000000000';

/** A state machine definition with every intrinsic resolved, plus where its Lambda references lead. */
export interface ResolvedStateMachine {
  /** Logical id of the state machine in the template. */
  readonly logicalId: string;
  /** Plain ASL (a JSON object). */
  readonly definition: Record<string, unknown>;
  /** Task resource ARN or FunctionName value (as it appears in the resolved ASL) -> the Lambda's logical id in the template. */
  readonly functions: ReadonlyMap<string, string>;
}

/** The fake but stable ARN that stands for a Lambda function of the template. */
export function localFunctionArn(logicalId: string): string {
  return `arn:${LOCAL_PARTITION}:lambda:${LOCAL_REGION}:${LOCAL_ACCOUNT_ID}:function:${logicalId}`;
}

const STATE_MACHINE_TYPE = 'AWS::StepFunctions::StateMachine';
const LAMBDA_FUNCTION_TYPE = 'AWS::Lambda::Function';

const resourceSchema = z.looseObject({
  Type: z.string(),
  Properties: z.record(z.string(), z.unknown()).optional(),
});
const templateSchema = z.looseObject({ Resources: z.record(z.string(), resourceSchema) });
type Resource = z.infer<typeof resourceSchema>;

const definitionSchema = z.looseObject({
  StartAt: z.string().min(1),
  States: z.record(z.string(), z.unknown()),
});

const PSEUDO_PARAMETERS: Readonly<Record<string, string>> = {
  'AWS::Partition': LOCAL_PARTITION,
  'AWS::Region': LOCAL_REGION,
  'AWS::AccountId': LOCAL_ACCOUNT_ID,
  'AWS::URLSuffix': 'amazonaws.com',
};

/**
 * Finds the state machine in `template` (the only one, or the one with `stateMachineLogicalId`) and
 * resolves its definition to plain ASL.
 */
export function resolveStateMachine(template: unknown, stateMachineLogicalId?: string): ResolvedStateMachine {
  const parsed = templateSchema.safeParse(template);
  if (!parsed.success) {
    throw new ConfigurationError(
      `Expected a CloudFormation template with a Resources object (for example Template.fromStack(stack).toJSON() or cdk.out/<stack>.template.json): ${z.prettifyError(parsed.error)}`,
    );
  }
  const resources = parsed.data.Resources;
  const [logicalId, stateMachine] = selectStateMachine(resources, stateMachineLogicalId);
  const resolver = new IntrinsicResolver(resources, logicalId);
  const properties = stateMachine.Properties ?? {};

  const substitutions = resolveSubstitutions(resolver, properties.DefinitionSubstitutions);
  let text: string;
  if (properties.DefinitionString !== undefined) {
    text = resolver.toText(properties.DefinitionString, 'DefinitionString');
  } else if (properties.Definition !== undefined) {
    text = JSON.stringify(resolver.resolveDeep(properties.Definition, 'Definition'));
  } else {
    throw new ConfigurationError(
      `State machine ${logicalId} has neither DefinitionString nor Definition (DefinitionS3Location is not supported locally); synthesize it with DefinitionBody.fromChainable or fromString`,
    );
  }
  text = substitute(text, substitutions, logicalId);

  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (error) {
    throw new ConfigurationError(`State machine ${logicalId}: the resolved definition is not valid JSON`, {
      cause: error,
    });
  }
  const definition = definitionSchema.safeParse(json);
  if (!definition.success) {
    throw new ConfigurationError(
      `State machine ${logicalId}: the resolved definition is not ASL (it needs StartAt and States): ${z.prettifyError(definition.error)}`,
    );
  }
  return { logicalId, definition: definition.data, functions: resolver.functions };
}

function selectStateMachine(
  resources: Record<string, Resource>,
  wanted: string | undefined,
): [string, Resource] {
  const machines = Object.entries(resources).filter(([, resource]) => resource.Type === STATE_MACHINE_TYPE);
  const ids = machines.map(([id]) => id).join(', ') || 'none';
  if (wanted !== undefined) {
    const found = machines.find(([id]) => id === wanted);
    if (found === undefined) {
      throw new ConfigurationError(
        `No ${STATE_MACHINE_TYPE} with logical id "${wanted}" in the template; state machines found: ${ids}`,
      );
    }
    return found;
  }
  const [only, ...others] = machines;
  if (only === undefined) {
    throw new ConfigurationError(`The template has no ${STATE_MACHINE_TYPE} resource`);
  }
  if (others.length > 0) {
    throw new ConfigurationError(
      `The template has ${machines.length} state machines (${ids}); pass the logical id of the one to run`,
    );
  }
  return only;
}

function resolveSubstitutions(resolver: IntrinsicResolver, raw: unknown): Map<string, string> {
  const substitutions = new Map<string, string>();
  if (raw === undefined) return substitutions;
  const parsed = z.record(z.string(), z.unknown()).safeParse(raw);
  if (!parsed.success) {
    throw new ConfigurationError(`DefinitionSubstitutions must be an object of name -> value`);
  }
  for (const [name, value] of Object.entries(parsed.data)) {
    const resolved = resolver.resolveDeep(value, `DefinitionSubstitutions.${name}`);
    substitutions.set(name, typeof resolved === 'string' ? resolved : JSON.stringify(resolved));
  }
  return substitutions;
}

function substitute(text: string, substitutions: Map<string, string>, logicalId: string): string {
  if (substitutions.size === 0) return text;
  return text.replace(/\$\{([^}]+)\}/g, (placeholder, name: string) => {
    const value = substitutions.get(name);
    if (value === undefined) {
      throw new ConfigurationError(
        `State machine ${logicalId}: the definition uses ${placeholder} but DefinitionSubstitutions has no "${name}"`,
      );
    }
    return value;
  });
}

/** Resolves the intrinsics CDK puts into a state machine definition. */
class IntrinsicResolver {
  readonly functions = new Map<string, string>();

  constructor(
    private readonly resources: Record<string, Resource>,
    private readonly stateMachineId: string,
  ) {}

  /** Resolves a value that must end up as a string (the DefinitionString). */
  toText(value: unknown, where: string): string {
    const resolved = this.resolveDeep(value, where);
    if (typeof resolved !== 'string') {
      throw new ConfigurationError(
        `State machine ${this.stateMachineId}: ${where} resolved to ${typeof resolved}, expected a string`,
      );
    }
    return resolved;
  }

  resolveDeep(value: unknown, where: string): unknown {
    if (Array.isArray(value)) return value.map((item, index) => this.resolveDeep(item, `${where}[${index}]`));
    if (value === null || typeof value !== 'object') return value;
    const entries = Object.entries(value);
    const [first] = entries;
    if (entries.length === 1 && first !== undefined && (first[0] === 'Ref' || first[0].startsWith('Fn::'))) {
      return this.intrinsic(first[0], first[1], where);
    }
    return Object.fromEntries(entries.map(([key, item]) => [key, this.resolveDeep(item, `${where}.${key}`)]));
  }

  private intrinsic(name: string, argument: unknown, where: string): string {
    switch (name) {
      case 'Ref':
        return this.ref(argument, where);
      case 'Fn::GetAtt':
        return this.getAtt(argument, where);
      case 'Fn::Join':
        return this.join(argument, where);
      default:
        throw new ConfigurationError(
          `State machine ${this.stateMachineId}: ${name} in ${where} is not supported locally (supported: Ref, Fn::GetAtt <Lambda>.Arn, Fn::Join)`,
        );
    }
  }

  private ref(argument: unknown, where: string): string {
    if (typeof argument !== 'string') {
      throw new ConfigurationError(
        `State machine ${this.stateMachineId}: Ref in ${where} must name a string`,
      );
    }
    const pseudo = PSEUDO_PARAMETERS[argument];
    if (pseudo !== undefined) return pseudo;
    if (argument.startsWith('AWS::')) {
      throw new ConfigurationError(
        `State machine ${this.stateMachineId}: the pseudo parameter ${argument} in ${where} has no local value (known: ${Object.keys(PSEUDO_PARAMETERS).join(', ')})`,
      );
    }
    // Ref of a Lambda function is its name; locally the name is the logical id, as in localFunctionArn.
    if (this.resources[argument]?.Type === LAMBDA_FUNCTION_TYPE) this.functions.set(argument, argument);
    return argument;
  }

  private getAtt(argument: unknown, where: string): string {
    const parsed = z
      .union([z.tuple([z.string(), z.string()]), z.string().regex(/^[^.]+\..+$/)])
      .safeParse(argument);
    if (!parsed.success) {
      throw new ConfigurationError(
        `State machine ${this.stateMachineId}: Fn::GetAtt in ${where} must be [LogicalId, Attribute]`,
      );
    }
    const [logicalId = '', attribute = ''] =
      typeof parsed.data === 'string' ? splitOnce(parsed.data, '.') : parsed.data;
    const type = this.resources[logicalId]?.Type;
    if (type !== LAMBDA_FUNCTION_TYPE || attribute !== 'Arn') {
      throw new ConfigurationError(
        `State machine ${this.stateMachineId}: Fn::GetAtt ${logicalId}.${attribute} (${type ?? 'not in the template'}) in ${where} cannot be resolved locally; only the Arn of an ${LAMBDA_FUNCTION_TYPE} can`,
      );
    }
    const arn = localFunctionArn(logicalId);
    this.functions.set(arn, logicalId);
    return arn;
  }

  private join(argument: unknown, where: string): string {
    const parsed = z.tuple([z.string(), z.array(z.unknown())]).safeParse(argument);
    if (!parsed.success) {
      throw new ConfigurationError(
        `State machine ${this.stateMachineId}: Fn::Join in ${where} must be [delimiter, [values]]`,
      );
    }
    const [delimiter, parts] = parsed.data;
    return parts.map((part, index) => this.toText(part, `${where}.Fn::Join[${index}]`)).join(delimiter);
  }
}

function splitOnce(text: string, separator: string): [string, string] {
  const index = text.indexOf(separator);
  return [text.slice(0, index), text.slice(index + separator.length)];
}
