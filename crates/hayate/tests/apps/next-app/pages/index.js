// The smallest Next.js app: one server-rendered page.
export async function getServerSideProps() {
  return { props: { instance: process.env.HAYATE_INSTANCE ?? 'none' } };
}

export default function Home({ instance }) {
  return <p>next page from instance {instance}</p>;
}
