// Any address that is not a page.
import { Link } from '../components/Link';
import { useTitle } from '../hooks';
import { paths } from '../router';

export function NotFoundPage() {
  useTitle('Page not found');
  return (
    <section class="narrow">
      <h1>Page not found</h1>
      <p>There is no page at this address.</p>
      <p>
        <Link href={paths.top()}>Go to the top page</Link>
      </p>
    </section>
  );
}
