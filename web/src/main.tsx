// Entry point: mounts the app, or at /ops the operator console, loaded as its own chunk
// so that the users' app does not carry it.
import { render } from 'preact';
import { App } from './app';
import './styles.css';

const root = document.getElementById('app')!;
if (window.location.pathname === '/ops' || window.location.pathname.startsWith('/ops/')) {
  void import('./ops/Console').then(({ Console }) => render(<Console />, root));
} else {
  render(<App />, root);
}
