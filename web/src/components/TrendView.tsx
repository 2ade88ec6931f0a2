// The trend: one horizontal stacked bar per character, coloured by level.
import { useLayoutEffect } from 'preact/hooks';
import { api, LEVELS, type TrendEntry } from '../api';
import { formatDateTime, isoTime } from '../format';
import { usePolling } from '../hooks';
import { barWidth, describeCounts, summarizeTrend, type TrendSummary } from '../trend';
import { ErrorMessage, Loading } from './Status';

export const TREND_REFRESH_MS = 5000;

export function TrendView({ load = api.trend }: { load?: () => Promise<TrendEntry[]> }) {
  const { data } = usePolling(load, [load], TREND_REFRESH_MS);
  return (
    <section class="trend" aria-labelledby="trend-title">
      <div class="section-head">
        <h2 id="trend-title">Trend</h2>
        <p class="hint">
          Latest condition of every ISU, by character. Live: refreshed every {TREND_REFRESH_MS / 1000} s.
        </p>
      </div>
      {data.state === 'loading' && <Loading what="the trend" />}
      {data.state === 'failed' && <ErrorMessage error={data.error} />}
      {data.state === 'ready' && <TrendChart summary={summarizeTrend(data.value)} />}
    </section>
  );
}

/** User-timing mark set when the trend's rows are first in the DOM (painted in that frame);
 * the browser tests measure it. */
export const TREND_DRAWN_MARK = 'isucondition:trend-drawn';

export function TrendChart({ summary }: { summary: TrendSummary }) {
  useLayoutEffect(() => {
    if (performance.getEntriesByName(TREND_DRAWN_MARK).length === 0) performance.mark(TREND_DRAWN_MARK);
  }, []);
  return (
    <>
      <ul class="trend-totals" aria-label="ISUs by level">
        {LEVELS.map((level) => (
          <li key={level} class={`total total-${level}`}>
            <span class="total-count" data-testid={`total-${level}`}>
              {summary.totals[level]}
            </span>{' '}
            {level}
          </li>
        ))}
      </ul>
      {summary.total === 0 && <p class="hint">No ISU has reported a condition yet.</p>}
      <ul class="trend-rows">
        <li class="trend-row trend-header" aria-hidden="true">
          <span>Character</span>
          <span>ISUs by level of their latest condition</span>
          <span class="trend-counts">
            {LEVELS.map((level) => (
              <span key={level} class={`count count-${level}`}>
                {level.slice(0, 4)}
              </span>
            ))}
          </span>
          <span class="trend-latest">Latest report</span>
        </li>
        {summary.characters.map((row) => (
          <li key={row.character} class="trend-row" data-character={row.character}>
            <span class="trend-name">{row.character}</span>
            <span class="trend-track" role="img" aria-label={`${row.character}: ${describeCounts(row.counts)}`}>
              {LEVELS.map((level) =>
                row.counts[level] > 0 ? (
                  <span
                    key={level}
                    class={`bar bar-${level}`}
                    style={{ width: barWidth(row.counts[level], summary.maxTotal) }}
                  />
                ) : null,
              )}
            </span>
            <span class="trend-counts" aria-hidden="true">
              {LEVELS.map((level) => (
                <span key={level} class={`count count-${level}`} title={level}>
                  {row.counts[level]}
                </span>
              ))}
            </span>
            <span class="trend-latest">
              {row.latest === null ? '—' : <time dateTime={isoTime(row.latest)}>{formatDateTime(row.latest)}</time>}
            </span>
          </li>
        ))}
      </ul>
    </>
  );
}
