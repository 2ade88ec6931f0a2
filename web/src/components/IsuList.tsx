// The signed-in user's ISUs with their latest condition.
import { api, type IsuWithLatest } from '../api';
import { describeConditionFlags, formatDateTime, isoTime } from '../format';
import { usePolling } from '../hooks';
import { paths } from '../router';
import { Link } from './Link';
import { Empty, ErrorMessage, LevelBadge, Loading } from './Status';

export const ISU_LIST_REFRESH_MS = 5000;

export function IsuListSection() {
  const { data } = usePolling(api.listIsus, [], ISU_LIST_REFRESH_MS);
  return (
    <section aria-labelledby="isus-title">
      <div class="section-head">
        <h2 id="isus-title">Your ISUs</h2>
        <Link class="button" href={paths.register()}>
          Register an ISU
        </Link>
      </div>
      {data.state === 'loading' && <Loading what="your ISUs" />}
      {data.state === 'failed' && <ErrorMessage error={data.error} />}
      {data.state === 'ready' && <IsuList isus={data.value} />}
    </section>
  );
}

export function IsuList({ isus }: { isus: readonly IsuWithLatest[] }) {
  if (isus.length === 0) {
    return (
      <Empty title="You have no ISUs yet.">
        <p>
          Register one with its JIA ISU ID: <Link href={paths.register()}>register an ISU</Link>.
        </p>
      </Empty>
    );
  }
  return (
    <ul class="isu-list">
      {isus.map((isu) => (
        <li key={isu.jia_isu_uuid} class="isu-card" data-uuid={isu.jia_isu_uuid}>
          <img class="isu-icon" src={api.iconUrl(isu.jia_isu_uuid)} alt="" width={64} height={64} loading="lazy" />
          <div class="isu-card-body">
            <h3 class="isu-name">
              <Link href={paths.isu(isu.jia_isu_uuid)}>{isu.name}</Link>
            </h3>
            <p class="isu-character">{isu.character}</p>
            <LatestCondition isu={isu} />
          </div>
        </li>
      ))}
    </ul>
  );
}

function LatestCondition({ isu }: { isu: IsuWithLatest }) {
  const latest = isu.latest_isu_condition;
  if (!latest) return <p class="latest hint">No condition reported yet.</p>;
  return (
    <div class="latest">
      <p>
        <LevelBadge level={latest.condition_level} />{' '}
        <span>
          {describeConditionFlags(latest.condition)}, {latest.is_sitting ? 'sitting' : 'not sitting'}
        </span>
      </p>
      <p class="hint">
        <time dateTime={isoTime(latest.timestamp)}>{formatDateTime(latest.timestamp)}</time>
      </p>
    </div>
  );
}
