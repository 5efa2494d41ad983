# ActiveRecord 6.1 (Debian's ruby-activerecord, ruby-pg): the recipes of docs/clients/ruby.md, run
# against a server with the extension. Connects as PGHOST, PGPORT, PGUSER and PGDATABASE say.
# Exits 1 on the first claim that does not hold; prints one line of what it checked.
require "active_record"
require "json"
require "stringio"

def check(ok, what)
  return if ok
  warn "activerecord: FAILED: #{what}"
  exit 1
end

ActiveRecord::Migration.verbose = false
ActiveRecord::Base.establish_connection(
  adapter: "postgresql", host: ENV.fetch("PGHOST"), port: ENV.fetch("PGPORT"),
  username: ENV.fetch("PGUSER"), database: ENV.fetch("PGDATABASE")
)

# region: migration
class CreateOrders < ActiveRecord::Migration[6.1]
  def change
    # The default as a lambda: its SQL goes into the DEFAULT clause as it is
    create_table :orders, id: :bigint, default: -> { "snowflake_nextval(4)" } do |t|
      t.text :customer, null: false
    end
  end
end
# endregion

# The trap: the default as a string is taken for a value, cast to an integer, and dropped.
class CreateOrdersWithStringDefault < ActiveRecord::Migration[6.1]
  def change
    create_table :orders_string_default, id: :bigint, default: "snowflake_nextval(4)" do |t|
      t.text :customer, null: false
    end
  end
end

CreateOrders.migrate(:up)
CreateOrdersWithStringDefault.migrate(:up)
conn = ActiveRecord::Base.connection
check(conn.columns(:orders).find { |c| c.name == "id" }.default_function == "snowflake_nextval(4)",
      "the lambda default is not the column's DEFAULT")
check(conn.columns(:orders_string_default).find { |c| c.name == "id" }.default_function.nil?,
      "the string default was kept: the trap the docs state did not show")
begin
  conn.execute("INSERT INTO orders_string_default (customer) VALUES ('ada')")
  check(false, "an insert into the table migrated with a string default succeeded")
rescue ActiveRecord::NotNullViolation => e
  check(e.cause.result.error_field(PG::PG_DIAG_SQLSTATE) == "23502", "not 23502: #{e.message}")
end

# region: model
class Order < ActiveRecord::Base
  def as_json(options = nil)
    super.merge("id" => id.to_s) # the ID as text in JSON: JavaScript reads numbers as doubles
  end
end
# endregion

customers = (0...1000).map { |i| "customer #{i}" }

# region: insert
order = Order.create!(customer: "ada") # order.id: the generated key (INSERT ... RETURNING "id")
# endregion
check(order.id.is_a?(Integer), "key is a #{order.id.class}")
check(Order.find_by!(customer: "ada").id == order.id, "key read back vs stored")

# region: batch
ids = Order.insert_all(customers.map { |customer| { customer: customer } }, returning: %w[id])
           .rows.map(&:first) # one INSERT ... RETURNING "id"; insert_all skips validations
# endregion
check(ids.size == customers.size, "#{ids.size} batch keys")
check(ids.each_cons(2).all? { |a, b| a < b }, "batch keys not increasing")
check(ids == Order.where.not(customer: "ada").order(:id).pluck(:id), "batch keys vs stored")

# region: decode
decoded = Order.select(:id, "(snowflake_decode(id)).*").find(order.id)
# decoded.ts a Time (UTC), decoded.shard and decoded.seq Integers: typed columns, no warning
# endregion
sql_ts, sql_shard, sql_seq = conn.select_rows(
  "SELECT snowflake_timestamp(#{order.id}), snowflake_shard(#{order.id}), snowflake_seq(#{order.id})").first
check(decoded.shard == 4 && sql_shard == 4, "decoded shard #{decoded.shard}")
check(decoded.ts == sql_ts && decoded.ts.is_a?(Time), "decoded ts #{decoded.ts.inspect}, snowflake_timestamp #{sql_ts.inspect}")
check(decoded.seq == sql_seq && decoded.seq.is_a?(Integer), "decoded seq #{decoded.seq.inspect}")
warnings = StringIO.new
$stderr = warnings
Order.select(:id, "(snowflake_decode(id)).*").find(order.id).ts
record = conn.select_value("SELECT snowflake_decode(#{order.id})")
$stderr = STDERR
parts_oid = conn.select_value("SELECT 'snowflake_parts'::regtype::oid")
check(warnings.string.scan("unknown OID").size == 1 && warnings.string.include?("unknown OID #{parts_oid}"),
      "warnings: #{warnings.string.inspect}")
check(record.is_a?(String) && record.end_with?(",4,#{sql_seq})"), "the unexpanded parts: #{record.inspect}")

body = order.to_json
check(JSON.parse(body)["id"] == order.id.to_s, "to_json with the model's as_json: #{body}")
# The trap: to_json of the bare attributes writes the ID as a number, and a reader that takes
# JSON numbers as doubles (JavaScript) changes nearly every one.
changed = ids.count { |id| Float(JSON.generate({ "id" => id })[/\d+/]).to_i != id }
check(changed.positive?, "no ID changed as a double: the trap the docs state did not show")

token = conn.select_value("SELECT snowflake_compose(clock_timestamp() + interval '150 ms', 9, 0)")
seen = token
# region: causal
# seen: the causality token, the largest ID this client was shown (by any server), or nil.
# Observed first, the new key is above it whatever the two servers' clocks say.
Order.transaction do
  Order.connection.select_value(
    Order.sanitize_sql_array(["SELECT snowflake_observe(?)", seen]))
  Order.create!(customer: "bob")
end
# endregion
bob = Order.find_by!(customer: "bob")
check(bob.id > token, "key #{bob.id} not above the token #{token}")
check(conn.select_value("SELECT snowflake_observe(NULL)").nil?, "a nil token observed something")

puts "activerecord #{ActiveRecord.version}: lambda default kept, string default dropped (insert: 23502); " \
     "1 key and #{ids.size} batch keys read back as stored, increasing; decoded shard 4; " \
     "expanded parts typed, unexpanded a String; to_json with id as text; as doubles #{changed} of #{ids.size} IDs change; " \
     "a key written after a token 150 ms ahead is above it"
