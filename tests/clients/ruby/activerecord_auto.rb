# ActiveRecord 6.1 with automatic keys: a migration that says nothing about its key (Rails makes
# it bigserial) on a database whose snowflake_id.auto_keys lists public, then create! and
# insert_all. Connects as PGHOST, PGPORT, PGUSER and PGDATABASE say; exits 1 on the first
# claim that does not hold; prints one line of what it checked.
require "active_record"

def check(ok, what)
  return if ok
  warn "activerecord-auto: FAILED: #{what}"
  exit 1
end

ActiveRecord::Migration.verbose = false
config = { adapter: "postgresql", host: ENV.fetch("PGHOST"), port: ENV.fetch("PGPORT"),
           username: ENV.fetch("PGUSER"), database: ENV.fetch("PGDATABASE") }
ActiveRecord::Base.establish_connection(config)
# The database's settings (docs/orms.md), then a new connection that takes them.
database = ActiveRecord::Base.connection.quote_table_name(ENV.fetch("PGDATABASE"))
ActiveRecord::Base.connection.execute("ALTER DATABASE #{database} SET snowflake_id.auto_keys = public")
ActiveRecord::Base.connection.execute("ALTER DATABASE #{database} SET snowflake_id.shard = 4")
ActiveRecord::Base.establish_connection(config)

# region: migration
class CreateOrders < ActiveRecord::Migration[6.1]
  def change
    create_table :orders do |t| # id bigserial primary key, as Rails makes it
      t.text :customer, null: false
    end
  end
end
# endregion

CreateOrders.migrate(:up)
conn = ActiveRecord::Base.connection
id_column = conn.columns(:orders).find { |c| c.name == "id" }
check(id_column.default_function == "snowflake_nextval()" && id_column.sql_type == "bigint",
      "the migrated key: #{id_column.sql_type} DEFAULT #{id_column.default_function}")
check(conn.select_value("SELECT pg_get_serial_sequence('orders', 'id')").nil?, "a sequence is left")

class Order < ActiveRecord::Base
end

# region: insert
order = Order.create!(customer: "ada") # order.id: a snowflake ID (INSERT ... RETURNING "id")
ids = Order.insert_all((0...1000).map { |i| { customer: "customer #{i}" } }, returning: %w[id])
           .rows.map(&:first)
# endregion
check(Order.find_by!(customer: "ada").id == order.id, "key read back vs stored")
check(ids.size == 1000 && ids.each_cons(2).all? { |a, b| a < b }, "batch keys not increasing")
check(ids == Order.where.not(customer: "ada").order(:id).pluck(:id), "batch keys vs stored")
check(conn.select_values("SELECT DISTINCT snowflake_shard(id) FROM orders") == [4], "shards of the keys")
check(order.id > 2**53, "key #{order.id} is no snowflake ID")

puts "activerecord #{ActiveRecord.version}: the migration's bigserial key became DEFAULT snowflake_nextval(); " \
     "create! and insert_all read back 1,001 snowflake keys of shard 4, increasing, as stored"
