import { readFileSync } from 'node:fs';
import { App } from 'aws-cdk-lib';
import { Annotations, Match, Template } from 'aws-cdk-lib/assertions';
import { describe, expect, it } from 'vitest';
import { resolveStateMachine } from '../../lib/asl.ts';
import { DsrStack } from '../../lib/dsr-stack.ts';
import { synthesizeTemplate } from '../../lib/template.ts';
import type { CfnObject } from './fixtures.ts';

const doc = (name: string) => readFileSync(new URL(`../../docs/${name}`, import.meta.url), 'utf8');
/** One line of prose, however the paragraph is wrapped. */
const unwrapped = (name: string) => doc(name).replace(/\s*\n\s*/g, ' ');
const figure = (value: number) => value.toLocaleString('en-US');

/** What synth says of the history budget under `config`: the info it prints, or the error it throws. */
function historyBudget(config: Record<string, number>): { accepted: boolean; events: number; text: string } {
  const app = new App({ context: { 'aws:cdk:bundling-stacks': [] } });
  try {
    const stack = new DsrStack(app, 'Docs', { config });
    const [info] = Annotations.fromStack(stack).findInfo('*', Match.stringLikeRegexp('worst case'));
    const text = String(info?.entry.data ?? '');
    return { accepted: true, events: Number(/worst case ([\d,]+)/.exec(text)?.[1]?.replace(/,/g, '')), text };
  } catch (error) {
    const text = String(error);
    return {
      accepted: false,
      events: Number(/up to ([\d,]+) history/.exec(text)?.[1]?.replace(/,/g, '')),
      text,
    };
  }
}

describe('docs/deploy.md: the history budget as synth prints it', () => {
  const deploy = unwrapped('deploy.md');

  it('quotes the line synth prints with the defaults', () => {
    // Act
    const defaults = historyBudget({});

    // Assess
    expect(defaults.accepted).toBe(true);
    expect(deploy).toContain(`\`${defaults.text}\` with the defaults`);
  });

  it('names the longest accepted retry horizon and the first refused, with their figures', () => {
    // Prepare
    const [, , longest = '', next = ''] =
      /with the default schedule (\d+) h is the longest accepted \(([\d,]+) events; (?:\d+) h comes to ([\d,]+) and is refused\)/.exec(
        deploy,
      ) ?? [];
    const hours = Number(/with the default schedule (\d+) h is the longest/.exec(deploy)?.[1]);

    // Act
    const accepted = historyBudget({ retryHorizonHours: hours });
    const refused = historyBudget({ retryHorizonHours: hours + 1 });

    // Assess
    expect(accepted).toMatchObject({ accepted: true });
    expect(refused).toMatchObject({ accepted: false });
    expect(deploy).toContain(`${hours + 1} h comes to`);
    expect([longest, next]).toEqual([figure(accepted.events), figure(refused.events)]);
  });

  it('gives the 7-day budget figures with the default schedule and with a 4-hour cap and 10% growth', () => {
    // Prepare
    const week = 7 * 24 * 3600;

    // Act
    const refused = historyBudget({ pollBudgetSeconds: week });
    const accepted = historyBudget({
      pollBudgetSeconds: week,
      pollMaxSeconds: 14_400,
      pollGrowthPercent: 10,
    });

    // Assess
    expect(refused.accepted).toBe(false);
    expect(accepted.accepted).toBe(true);
    expect(deploy).toContain(
      `refused (${figure(refused.events)} events), with a 4-hour cap and waits growing by 10% it is accepted (${figure(accepted.events)})`,
    );
  });
});

describe('docs/cost.md', () => {
  const cost = doc('cost.md');

  describe('state transitions', () => {
    const states = resolveStateMachine(synthesizeTemplate()).definition.States as Record<string, CfnObject>;
    const startAt = String(resolveStateMachine(synthesizeTemplate()).definition.StartAt);

    /**
     * The transitions Step Functions bills for one run along the definition (the start, and one per
     * state entered): each Choice takes the branch `choose` names for it, which must be one of its
     * own, else its Default.
     */
    function transitions(choose: (choice: string, visit: number) => string | undefined): number {
      const visits = new Map<string, number>();
      let name: string | undefined = startAt;
      let billed = 1;
      while (name !== undefined) {
        const state: CfnObject | undefined = states[name];
        expect(state, name).toBeDefined();
        billed += 1;
        const visit = (visits.get(name) ?? 0) + 1;
        visits.set(name, visit);
        if (state?.Type === 'Succeed' || state?.End === true) break;
        if (state?.Type === 'Choice') {
          const chosen = choose(name, visit);
          const branches = (state.Choices as CfnObject[]).map((choice) => choice.Next);
          if (chosen !== undefined) expect(branches, `${name} -> ${chosen}`).toContain(chosen);
          name = chosen ?? state.Default;
        } else name = state?.Next;
      }
      return billed;
    }
    const run = (type: 'access' | 'erasure', checks: number) =>
      transitions((choice, visit) => {
        if (choice === 'ExportReady?') return visit < checks ? undefined : 'ArchiveExport';
        if (choice === 'RequestType?') return type === 'erasure' ? 'EraseSubject' : undefined;
        return undefined;
      });
    const formula = (type: string) => {
      const [, base = ''] = new RegExp(`^- ${type}: \`(\\d+) \\+ 3c\``, 'm').exec(cost) ?? [];
      return (checks: number) => Number(base) + 3 * checks;
    };

    it.each([1, 10, 28, 42, 56, 121, 148])('matches the formulas for %i checks, and the table', (checks) => {
      // Act / Assess
      expect(run('access', checks)).toBe(formula('access')(checks));
      expect(run('erasure', checks)).toBe(formula('erasure')(checks));
      expect(cost).toMatch(
        new RegExp(`\\| ${checks} \\| ${run('access', checks)} \\| ${run('erasure', checks)} \\| \\$`),
      );
    });

    it('matches the measured rows (three pending answers: four checks) and the no_data path', () => {
      // Assess
      expect(cost).toContain(`| access, export ready after 3 polls | ${run('access', 4)} |`);
      expect(cost).toContain(`| erasure, export ready after 3 polls | ${run('erasure', 4)} |`);
      const noData = transitions((choice) => (choice === 'AlreadyCompleted?' ? 'RecordNoData' : undefined));
      expect(cost).toContain(`subject not on the platform (\`no_data\`): ${noData};`);
    });
  });

  describe('the fixed monthly cost', () => {
    const resources = Object.values(
      Template.fromStack(
        new DsrStack(new App({ context: { 'aws:cdk:bundling-stacks': [] } }), 'Cost'),
      ).toJSON().Resources as Record<string, { Type: string; Properties: CfnObject }>,
    );
    const count = (type: string) => resources.filter((resource) => resource.Type === type).length;
    const table = cost.slice(cost.indexOf('## Fixed monthly cost'));
    const rows = table
      .split('\n')
      .filter((line) => line.startsWith('| ') && line.includes('$'))
      .map((line) => line.split('|').map((cell) => cell.trim()))
      .map(([, item = '', arithmetic = '', amount = '']) => ({
        item,
        arithmetic,
        amount: Number(/\$([\d.]+)/.exec(amount)?.[1]),
      }));

    it('counts the keys, alarms, custom metrics and secrets of the synthesized stack', () => {
      // Assess
      expect(table).toContain(`| ${count('AWS::KMS::Key') === 2 ? 'two' : count('AWS::KMS::Key')} KMS keys`);
      expect(table).toContain(`| ${count('AWS::CloudWatch::Alarm')} alarms`);
      expect(table).toContain(`| ${count('AWS::CloudWatch::Alarm')} x $0.10 |`);
      expect(table).toContain(`| ${count('AWS::SecretsManager::Secret') === 3 ? 'three' : 'three?'} secrets`);
      // Every metric of our namespace an alarm watches is in the row, and the row counts its names.
      const alarmed = resources
        .filter(
          (resource) =>
            resource.Type === 'AWS::CloudWatch::Alarm' && resource.Properties.Namespace === 'svc-dsr',
        )
        .map((resource) => String(resource.Properties.MetricName));
      const row = rows.find(({ item }) => item.includes('custom metrics'))?.item ?? '';
      for (const metric of alarmed) expect(row).toContain(metric);
      const listed = row.match(/\b[A-Z][a-z]+(?:[A-Z][a-z]*)+\b/g) ?? [];
      expect(row).toMatch(new RegExp(`^${new Set(listed).size} custom metrics`));
    });

    it('adds up its rows to its total, each row from its arithmetic', () => {
      // Assess
      const total = rows.find((row) => row.item.includes('total'));
      const items = rows.filter((row) => !row.item.includes('total'));
      expect(items.length).toBeGreaterThanOrEqual(5);
      const sum = items.reduce((acc, row) => acc + row.amount, 0);
      expect(total?.amount).toBeCloseTo(sum, 2);
      for (const row of items) {
        const product = /^(\d+) x \$([\d.]+)$/.exec(row.arithmetic);
        if (product !== null) expect(row.amount).toBeCloseTo(Number(product[1]) * Number(product[2]), 2);
      }
    });
  });
});

describe('docs/cost.md, a mass drop', () => {
  const cost = doc('cost.md');
  const results = readFileSync(new URL('../../local/bench/RESULTS.md', import.meta.url), 'utf8');
  const section = (regime: number) =>
    new RegExp(
      `<!-- section gate-simulation-regime-${regime} -->([\\s\\S]*?)<!-- /section gate-simulation-regime-${regime} -->`,
    ).exec(results)?.[1] ?? '';
  const count = (text: string) => Number(text.replace(/,/g, ''));
  const money = (value: number, digits = 2) => `$${value.toFixed(digits)}`;

  it.each([
    [0, 'exports ready in 1-30 min'],
    [1, 'exports ready in 1-4 h'],
  ])('prices regime %i (%s) from the transitions and invocations the simulation counted', (index, name) => {
    // Prepare
    const measured = section(index + 1);
    const requests = count(/Gate simulation: ([\d,]+) requests/.exec(measured)?.[1] ?? 'NaN');
    const regime = measured.split(/^Regime \d: /m)[1] ?? '';
    const transitions = count(/state transitions\s+([\d,]+)/.exec(regime)?.[1] ?? 'NaN') / requests;
    const invocations = count(/([\d,]+) invocations/.exec(regime)?.[1] ?? 'NaN') / requests;

    // Act: per 1,000 requests, at the prices the page assumes
    const stepFunctions = transitions * 1000 * 0.000025;
    const lambdaRequests = (invocations * 1000 * 0.2) / 1_000_000;
    const logBytes = transitions * 3.3 * 350 + invocations * 1000;
    const logs = ((logBytes * 1000) / 1e9) * 0.5;
    const xray = (invocations * 1000 * 5) / 1_000_000;

    // Assess
    expect(regime.startsWith(name)).toBe(true);
    expect(cost).toContain(
      `| ${name} | ${transitions.toFixed(1)} | ${money(stepFunctions)} | ${invocations.toFixed(1)} | ${money(lambdaRequests, 4)} | ${money(logs)} | ${money(xray)} |`,
    );
    expect(cost).toContain(money(stepFunctions + lambdaRequests + logs + xray));
  });
});
