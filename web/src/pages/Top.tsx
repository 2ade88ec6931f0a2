// /: sign-in or your ISUs, and the trend.
import { IsuListSection } from '../components/IsuList';
import { TrendView } from '../components/TrendView';
import { useTitle } from '../hooks';
import { useSession, signInUrl } from '../session';

export function TopPage() {
  const { user } = useSession();
  useTitle(user ? 'Your ISUs' : '');
  return (
    <>
      {user === null && (
        <section class="hero">
          <h1>Know how your ISU is doing</h1>
          <p>ISUCONDITION keeps the condition of your ISUs: whether they are dirty, overweight or broken, hour by hour.</p>
          <a class="button button-primary" href={signInUrl('/')}>
            Sign in with JIA
          </a>
        </section>
      )}
      {user && <h1 class="visually-hidden">Your ISUs and the trend</h1>}
      {user && <IsuListSection />}
      <TrendView />
    </>
  );
}
