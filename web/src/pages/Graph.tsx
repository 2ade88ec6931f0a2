// /isu/:id/graph: one day of hourly scores and problem percentages.
import { api, type GraphPoint } from '../api';
import { GraphChart } from '../components/GraphChart';
import { IsuFrame } from '../components/IsuFrame';
import { Empty, ErrorMessage, Loading } from '../components/Status';
import { addLocalDays, formatDay, formatHour, parseIntParam, startOfLocalDay } from '../format';
import { GRAPH_LINES, hoursWithData, toGraphSeries } from '../graph';
import { usePolling } from '../hooks';
import { navigate, paths, useLocation } from '../router';

export const GRAPH_REFRESH_MS = 5000;

export function GraphPage({ uuid }: { uuid: string }) {
  return <IsuFrame uuid={uuid} tab="graph">{(isu) => <DayGraph uuid={isu.jia_isu_uuid} />}</IsuFrame>;
}

interface Loaded {
  /** Local midnight of the day shown; null when the ISU has no condition yet. */
  day: number | null;
  points: GraphPoint[];
}

/**
 * Without `?day=`, follows the day of the ISU's latest condition (condition times
 * come from JIA's clock, not the browser's); with it, shows that day.
 */
async function loadGraph(uuid: string, fixedDay: number | null): Promise<Loaded> {
  let day = fixedDay;
  if (day === null) {
    const latest = await api.latestCondition(uuid);
    if (!latest) return { day: null, points: [] };
    day = startOfLocalDay(latest.timestamp);
  }
  return { day, points: await api.graph(uuid, day) };
}

function DayGraph({ uuid }: { uuid: string }) {
  const { search } = useLocation();
  const fixedDay = parseIntParam(search.get('day'));
  const { data } = usePolling(() => loadGraph(uuid, fixedDay), [uuid, fixedDay], GRAPH_REFRESH_MS);
  const goToDay = (day: number | null) => navigate(day === null ? paths.graph(uuid) : `${paths.graph(uuid)}?day=${day}`);

  if (data.state === 'loading') return <Loading what="the graph" />;
  if (data.state === 'failed') return <ErrorMessage error={data.error} />;
  const { day, points } = data.value;
  if (day === null) {
    return (
      <Empty title="No condition reported yet.">
        <p>The graph fills in as soon as the ISU reports; this page refreshes by itself.</p>
      </Empty>
    );
  }
  const series = toGraphSeries(points);
  const filled = hoursWithData(series);
  const dayLabel = formatDay(day);
  return (
    <section aria-labelledby="graph-title">
      <div class="day-nav">
        <button type="button" class="button" onClick={() => goToDay(addLocalDays(day, -1))}>
          ← Previous day
        </button>
        <h2 id="graph-title" data-day={day}>
          {dayLabel}
        </h2>
        <button type="button" class="button" onClick={() => goToDay(addLocalDays(day, 1))}>
          Next day →
        </button>
        {fixedDay !== null && (
          <button type="button" class="button" onClick={() => goToDay(null)}>
            Latest day
          </button>
        )}
      </div>
      <p class="hint" role="status">
        {filled} of 24 hours have conditions. Score: 100 when every report is fine, lower with problems.
        {fixedDay === null && ' Following the latest day.'}
      </p>
      <GraphChart series={series} label={`Score and problem percentages per hour on ${dayLabel}`} />
      <details class="graph-table">
        <summary>Hourly figures</summary>
        <table>
          <thead>
            <tr>
              <th scope="col">Hour</th>
              {GRAPH_LINES.map((line) => (
                <th key={line.key} scope="col">
                  {line.label}
                </th>
              ))}
              <th scope="col">Reports</th>
            </tr>
          </thead>
          <tbody>
            {series.hours.map((hour, index) => (
              <tr key={hour} data-has-data={series.score[index] !== null ? 'true' : 'false'}>
                <th scope="row">{formatHour(hour)}</th>
                {GRAPH_LINES.map((line) => (
                  <td key={line.key}>{series[line.key][index] ?? '—'}</td>
                ))}
                <td>{series.counts[index]}</td>
              </tr>
            ))}
          </tbody>
        </table>
      </details>
    </section>
  );
}
