/**
 * Report: a year's CCPA §7102 metrics with charts (requests and median days per month, the
 * on-time share per type), its §7101 records as CSV, and the state of the daily manifests' chain.
 */
import { formulaLike } from '../../../lambdas/shared/csv-cells.ts';
import { RECORD_COLUMNS, SITES_RECORD_COLUMNS } from '../../../lambdas/shared/evidence/record-columns.ts';
import type { Api } from '../api.ts';
import { Field, Show, useLoad } from '../parts.tsx';
import { navigate, type Route } from '../route.ts';
import { localDate } from '../time.ts';
import type { ReportAnswer } from '../types.ts';

interface ManifestsAnswer {
  readonly ok: boolean;
  readonly problem: string | null;
  readonly manifests: readonly { day: string; locked: number }[];
}

const MONTHS = ['Jan', 'Feb', 'Mar', 'Apr', 'May', 'Jun', 'Jul', 'Aug', 'Sep', 'Oct', 'Nov', 'Dec'];

type ReportRecord = ReportAnswer['records'][number];

function median(values: readonly number[]): number | undefined {
  if (values.length === 0) return undefined;
  const sorted = [...values].sort((a, b) => a - b);
  const middle = Math.floor(sorted.length / 2);
  return sorted.length % 2 === 1 ? sorted[middle] : ((sorted[middle - 1] ?? 0) + (sorted[middle] ?? 0)) / 2;
}

/** Per month of receipt (in the zone): how many requests, and the median days to respond of those answered. */
export function byMonth(records: readonly ReportRecord[], timeZone: string) {
  return MONTHS.map((name, index) => {
    const month = records.filter(
      (record) => Number(localDate(record.received_at, timeZone).slice(5, 7)) === index + 1,
    );
    const days = month.flatMap((record) => (record.days_to_respond === null ? [] : [record.days_to_respond]));
    return { name, requests: month.length, median: median(days) };
  });
}

/** A bar chart in SVG, with its figures as text beside it for a screen reader. */
function Bars({
  title,
  values,
  unit,
}: {
  readonly title: string;
  readonly values: readonly { name: string; value: number | undefined }[];
  readonly unit: string;
}) {
  const top = Math.max(1, ...values.map((v) => v.value ?? 0));
  // One width for every chart, however many bars: a chart of four types reads at the scale of one of twelve months.
  const chartWidth = 288;
  const width = chartWidth / Math.max(values.length, 1);
  const bar = Math.min(width - 6, 18);
  return (
    <figure class="chart">
      <figcaption>{title}</figcaption>
      <svg
        viewBox={`0 0 ${chartWidth} 120`}
        role="img"
        aria-label={`${title}: ${values.map((v) => `${v.name} ${v.value ?? 'none'}`).join(', ')}`}
      >
        {values.map((v, index) => {
          const height = ((v.value ?? 0) / top) * 100;
          return (
            <g key={v.name}>
              <rect
                class="bar"
                x={index * width + (width - bar) / 2}
                y={104 - height}
                width={bar}
                height={height}
              />
              <text x={index * width + width / 2} y={116} text-anchor="middle" class="axis">
                {v.name}
              </text>
            </g>
          );
        })}
      </svg>
      <p class="muted">
        {values
          .map((v) => `${v.name}: ${v.value === undefined ? '—' : `${Math.round(v.value * 10) / 10}${unit}`}`)
          .join(' · ')}
      </p>
    </figure>
  );
}

/** A CSV cell as the CLI writes it: RFC 4180 quoting, and a cell that could run as a formula defused. */
function csvCell(value: unknown): string {
  if (value === null || value === undefined) return '';
  let text = typeof value === 'object' ? JSON.stringify(value) : String(value);
  if (typeof value === 'string' && formulaLike(value)) text = `'${text}`;
  return /[",\r\n]/.test(text) ? `"${text.replaceAll('"', '""')}"` : text;
}

/** The §7101 records as `svc-dsr report --format csv --table records` writes them. */
export function recordsCsv(records: readonly ReportRecord[]): string {
  const columns = records.some((record) => record.sites !== null) ? SITES_RECORD_COLUMNS : RECORD_COLUMNS;
  return `${[
    columns.join(','),
    ...records.map((record) => columns.map((column) => csvCell(record[column])).join(',')),
  ].join('\r\n')}\r\n`;
}

function Downloads({ report, year }: { readonly report: ReportAnswer; readonly year: string }) {
  const url = URL.createObjectURL(new Blob([recordsCsv(report.records)], { type: 'text/csv' }));
  return (
    <p>
      <a href={url} download={`ccpa-7101-records-${year}.csv`}>
        Download the §7101 records ({report.records.length}) as CSV
      </a>
    </p>
  );
}

export function ReportPage({ api, route }: { readonly api: Api; readonly route: Route }) {
  const timeZone = api.config.time_zone;
  const thisYear = localDate(new Date().toISOString(), timeZone).slice(0, 4);
  const year = /^\d{4}$/.test(route.params.get('year') ?? '')
    ? (route.params.get('year') as string)
    : thisYear;
  const [loaded] = useLoad(async () => {
    const [report, manifests] = await Promise.all([
      api.get<ReportAnswer>('/report', { from: `${year}-01-01`, to: `${year}-12-31` }),
      api.get<ManifestsAnswer>('/manifests'),
    ]);
    return { report, manifests };
  }, [year]);
  return (
    <section aria-labelledby="report-title">
      <h1 id="report-title">Report {year}</h1>
      <form
        class="filters"
        aria-label="Year"
        onSubmit={(event) => {
          event.preventDefault();
          const chosen = new FormData(event.currentTarget).get('year');
          navigate('report', { year: typeof chosen === 'string' ? chosen : undefined });
        }}
      >
        <Field label="Year">
          <input name="year" type="number" min="2000" max="2100" value={year} />
        </Field>
        <button type="submit">Show</button>
      </form>
      <Show loaded={loaded}>
        {({ report, manifests }) => {
          const months = byMonth(report.records, timeZone);
          return (
            <>
              <p class="muted">
                Requests received in {year}, dates in {report.time_zone}; {report.checked} checked against
                their audit records.
              </p>
              {report.refused.length === 0 ? null : (
                <div class="problem" role="alert">
                  {report.refused.length} request(s) left out: their audit records do not back the ledger (
                  {report.refused.map((refused) => refused.request_id.slice(0, 8)).join(', ')}).
                </div>
              )}
              <div class="charts">
                <Bars
                  title="Requests received per month"
                  unit=""
                  values={months.map((m) => ({ name: m.name, value: m.requests }))}
                />
                <Bars
                  title="Median days to respond per month"
                  unit=" d"
                  values={months.map((m) => ({ name: m.name, value: m.median }))}
                />
                <Bars
                  title="Share answered on time, per type (%)"
                  unit="%"
                  values={report.metrics
                    .filter((metric) => metric.type !== 'all')
                    .map((metric) => {
                      const answered = metric.complied + metric.denied;
                      return {
                        name: `${metric.regulation} ${metric.type}`,
                        value: answered === 0 ? undefined : ((answered - metric.late) / answered) * 100,
                      };
                    })}
                />
              </div>
              <div class="scroll">
                <table>
                  <caption>§7102 metrics</caption>
                  <thead>
                    <tr>
                      <th scope="col">Regulation</th>
                      <th scope="col">Type</th>
                      <th scope="col">Received</th>
                      <th scope="col">Complied</th>
                      <th scope="col">Denied</th>
                      <th scope="col">Open</th>
                      <th scope="col">Late</th>
                      <th scope="col">Median days</th>
                      <th scope="col">Mean days</th>
                    </tr>
                  </thead>
                  <tbody>
                    {report.metrics.map((metric) => (
                      <tr>
                        <td>{metric.regulation}</td>
                        <td>{metric.type}</td>
                        <td>{metric.received}</td>
                        <td>{metric.complied}</td>
                        <td>{metric.denied}</td>
                        <td>{metric.open}</td>
                        <td>{metric.late}</td>
                        <td>{metric.median_days_to_respond ?? '—'}</td>
                        <td>
                          {metric.mean_days_to_respond === null
                            ? '—'
                            : Math.round(metric.mean_days_to_respond * 10) / 10}
                        </td>
                      </tr>
                    ))}
                  </tbody>
                </table>
              </div>
              <Downloads report={report} year={year} />
              <h2>Audit manifests</h2>
              <p role="status" class={manifests.ok ? 'done' : 'problem'}>
                {manifests.ok
                  ? `${manifests.manifests.length} daily manifest(s), each hashed and chained to the day before.`
                  : `The manifests' chain is broken: ${manifests.problem ?? 'unknown problem'}`}
              </p>
            </>
          );
        }}
      </Show>
    </section>
  );
}
