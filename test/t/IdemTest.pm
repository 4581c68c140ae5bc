# test/t/IdemTest.pm: what the TAP tests share.  A test loads it with
#     use FindBin;
#     use lib $FindBin::RealBin;
#     use IdemTest;
package IdemTest;

use strict;
use warnings;
use Exporter 'import';
use PostgreSQL::Test::Cluster;

our @EXPORT = qw(idem_node psql_verbose wait_for_lease_end);

# idem_node(NAME, OPTION => VALUE...): a new cluster, started, with the
# extension created in database postgres.  Options:
#   init       => {...}  arguments of PostgreSQL::Test::Cluster::init
#   preload    => [...]  shared_preload_libraries, in this order (the
#                        extension is preloaded only where it is listed)
#   conf       => '...'  more postgresql.conf lines
#   extensions => [...]  extensions created before idempotency
sub idem_node
{
	my ($name, %opt) = @_;
	my $node = PostgreSQL::Test::Cluster->new($name);
	$node->init(%{ $opt{init} // {} });
	my $conf = $opt{conf} // '';
	$conf = "shared_preload_libraries = '" . join(', ', @{ $opt{preload} }) . "'\n" . $conf
	  if $opt{preload};
	$node->append_conf('postgresql.conf', $conf) if $conf ne '';
	$node->start;
	$node->safe_psql('postgres',
		join('', map { "CREATE EXTENSION $_;\n" } @{ $opt{extensions} // [] }, 'idempotency'));
	return $node;
}

# psql_verbose(NODE, SQL): (exit status, stdout, stderr) of SQL in database
# postgres, its errors with their SQLSTATE ("ERROR:  IK003: ...")
sub psql_verbose
{
	my ($node, $sql) = @_;
	return $node->psql('postgres', "\\set VERBOSITY verbose\n$sql");
}

# wait_for_lease_end(NODE, KEY): until the server's clock has passed the
# lease of the record of KEY (in the default scope)
sub wait_for_lease_end
{
	my ($node, $key) = @_;
	$node->poll_query_until('postgres',
		"SELECT locked_until < clock_timestamp() FROM idempotent_record WHERE key = '$key'")
	  or die "lease of $key did not end";
	return;
}

1;
