// JDBC (pgjdbc, Debian's libpostgresql-jdbc-java): the recipes of docs/clients/java.md, run
// against a server with the extension over TCP (pgjdbc has no Unix-socket transport):
// java -cp postgresql.jar Jdbc.java JDBC_URL. Exits 1 on the first claim that does not hold.

import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.Statement;
import java.sql.Types;
import java.time.OffsetDateTime;
import java.util.ArrayList;
import java.util.List;
import org.postgresql.util.PGobject;

public class Jdbc {
    static void check(boolean ok, String what) {
        if (!ok) {
            System.err.println("jdbc: FAILED: " + what);
            System.exit(1);
        }
    }

    public static void main(String[] args) throws Exception {
        List<String> customers = new ArrayList<>();
        for (int i = 0; i < 1000; i++) customers.add("customer " + i);
        try (Connection conn = DriverManager.getConnection(args[0])) {
            if (args.length > 1 && args[1].equals("js53")) {
                runJs53(conn, customers);
            } else {
                run(conn, customers);
            }
        }
    }

    static void run(Connection conn, List<String> customers) throws Exception {
        // region: schema
        try (Statement st = conn.createStatement()) {
            st.execute("CREATE TABLE orders ("
                    + " id bigint PRIMARY KEY DEFAULT snowflake_nextval(4),"
                    + " customer text NOT NULL)");
        }
        // endregion

        // region: insert
        long id;
        try (PreparedStatement ps = conn.prepareStatement(
                "INSERT INTO orders (customer) VALUES (?)", new String[] {"id"})) {
            ps.setString(1, "ada");
            ps.executeUpdate();
            try (ResultSet keys = ps.getGeneratedKeys()) {  // RETURNING id
                keys.next();
                id = keys.getLong("id");
            }
        }
        // endregion
        try (Statement st = conn.createStatement();
                ResultSet rs = st.executeQuery("SELECT id FROM orders WHERE customer = 'ada'")) {
            rs.next();
            check(rs.getLong(1) == id, "key read back " + id + ", stored " + rs.getLong(1));
        }

        // region: batch
        List<Long> ids = new ArrayList<>();
        try (PreparedStatement ps = conn.prepareStatement(
                "INSERT INTO orders (customer) VALUES (?)", new String[] {"id"})) {
            for (String customer : customers) {
                ps.setString(1, customer);
                ps.addBatch();
            }
            ps.executeBatch();
            try (ResultSet keys = ps.getGeneratedKeys()) {  // one row per row inserted
                while (keys.next()) ids.add(keys.getLong("id"));
            }
        }
        // endregion
        check(ids.size() == customers.size(), ids.size() + " batch keys");
        for (int i = 1; i < ids.size(); i++) {
            check(ids.get(i - 1) < ids.get(i), "batch keys not increasing at " + i);
        }
        List<Long> stored = new ArrayList<>();
        try (Statement st = conn.createStatement();
                ResultSet rs = st.executeQuery(
                        "SELECT id FROM orders WHERE customer <> 'ada' ORDER BY id")) {
            while (rs.next()) stored.add(rs.getLong(1));
        }
        check(ids.equals(stored), "batch keys differ from the stored ones");

        // The trap: RETURN_GENERATED_KEYS appends RETURNING *, every column comes back.
        try (PreparedStatement ps = conn.prepareStatement(
                "INSERT INTO orders (customer) VALUES ('grace')", Statement.RETURN_GENERATED_KEYS)) {
            ps.executeUpdate();
            try (ResultSet keys = ps.getGeneratedKeys()) {
                check(keys.getMetaData().getColumnCount() == 2,
                        "RETURN_GENERATED_KEYS returned " + keys.getMetaData().getColumnCount()
                                + " columns, the docs say every column (2)");
            }
        }

        // region: decode
        OffsetDateTime ts;
        int shard;
        int seq;
        try (PreparedStatement ps = conn.prepareStatement(
                "SELECT (snowflake_decode(id)).* FROM orders WHERE id = ?")) {
            ps.setLong(1, id);
            try (ResultSet rs = ps.executeQuery()) {
                rs.next();
                ts = rs.getObject("ts", OffsetDateTime.class);
                shard = rs.getInt("shard");
                seq = rs.getInt("seq");
            }
        }
        // endregion
        try (PreparedStatement ps = conn.prepareStatement(
                "SELECT snowflake_timestamp(?), snowflake_shard(?), snowflake_seq(?), snowflake_decode(?)")) {
            for (int i = 1; i <= 4; i++) ps.setLong(i, id);
            try (ResultSet rs = ps.executeQuery()) {
                rs.next();
                check(ts.isEqual(rs.getObject(1, OffsetDateTime.class)), "decoded ts " + ts);
                check(shard == rs.getInt(2) && seq == rs.getInt(3) && shard == 4,
                        "decoded shard " + shard + ", seq " + seq);
                // Unexpanded, pgjdbc reads the composite as a PGobject of type "snowflake_parts",
                // its value text: it maps no composite to Java types (no java.sql.Struct).
                Object record = rs.getObject(4);
                check(record instanceof PGobject && ((PGobject) record).getType().equals("snowflake_parts"),
                        "unexpanded parts: " + record.getClass() + " " + ((PGobject) record).getType());
            }
        }

        // region: json
        String json;
        try (PreparedStatement ps = conn.prepareStatement("SELECT snowflake_json(?)::text")) {
            ps.setLong(1, id);
            try (ResultSet rs = ps.executeQuery()) {
                rs.next();
                json = rs.getString(1);  // {"id": "3827...", "ts": ..., "shard": 4, ...}: the ID as text
            }
        }
        // endregion
        check(json.contains("\"id\": \"" + id + "\""), "snowflake_json: " + json);
        long changed = ids.stream().filter(i -> (long) (double) i != i).count();
        check(changed > 0, "no ID changed as a double: the trap the docs state did not show");

        Long seen;
        try (Statement st = conn.createStatement(); ResultSet rs = st.executeQuery(
                "SELECT snowflake_compose(clock_timestamp() + interval '150 ms', 9, 0)")) {
            rs.next();
            seen = rs.getLong(1);
        }
        // region: causal
        // seen: the causality token, the largest ID this client was shown (by any server), or
        // null. Observed before the write, the new key is above it whatever the clocks say.
        try (PreparedStatement ps = conn.prepareStatement("SELECT snowflake_observe(?)")) {
            ps.setObject(1, seen, Types.BIGINT);
            ps.executeQuery().close();
        }
        // endregion
        try (Statement st = conn.createStatement(); ResultSet rs = st.executeQuery(
                "INSERT INTO orders (customer) VALUES ('bob') RETURNING id")) {
            rs.next();
            check(rs.getLong(1) > seen, "key " + rs.getLong(1) + " not above the token " + seen);
        }
        try (PreparedStatement ps = conn.prepareStatement("SELECT snowflake_observe(?)")) {
            ps.setObject(1, null, Types.BIGINT);
            try (ResultSet rs = ps.executeQuery()) {
                rs.next();
                check(rs.getObject(1) == null, "a null token observed " + rs.getObject(1));
            }
        }

        System.out.println("pgjdbc " + conn.getMetaData().getDriverVersion() + ": 1 key and " + ids.size()
                + " batch keys read back as stored, increasing; RETURN_GENERATED_KEYS returns every"
                + " column; decoded shard " + shard + "; the unexpanded parts are a PGobject of type snowflake_parts;"
                + " snowflake_json gives the ID as text; as doubles " + changed + " of " + ids.size()
                + " IDs change; a key written after a token 150 ms ahead is above it");
    }

    /** The JSON number of the field "id" in a JSON object, read as a double, as JavaScript reads it. */
    static double idAsDouble(String json) {
        java.util.regex.Matcher m = java.util.regex.Pattern.compile("\"id\": ?(\\d+)").matcher(json);
        check(m.find(), "no numeric id in " + json);
        return Double.parseDouble(m.group(1));
    }

    /** On a server in the js53 layout (`Jdbc.java URL js53`): IDs as plain JSON numbers. */
    static void runJs53(Connection conn, List<String> customers) throws Exception {
        try (Statement st = conn.createStatement(); ResultSet rs = st.executeQuery("SHOW snowflake_id.id_bits")) {
            rs.next();
            check(rs.getString(1).equals("53"), "the server runs id_bits = " + rs.getString(1) + ", not js53");
        }
        try (Statement st = conn.createStatement()) {
            st.execute("CREATE TABLE orders ("
                    + " id bigint PRIMARY KEY DEFAULT snowflake_nextval(4),"
                    + " customer text NOT NULL)");
        }
        // region: js53
        // Where snowflake_id.layout = 'js53' every ID is at most 2^53 - 1: written into JSON as a
        // number, it is kept exactly by readers that take numbers as doubles (JavaScript).
        long id;
        try (PreparedStatement ps = conn.prepareStatement(
                "INSERT INTO orders (customer) VALUES (?)", new String[] {"id"})) {
            ps.setString(1, "ada");
            ps.executeUpdate();
            try (ResultSet keys = ps.getGeneratedKeys()) {
                keys.next();
                id = keys.getLong("id");
            }
        }
        String body = "{\"id\":" + id + ",\"customer\":\"ada\"}";
        // endregion
        String text;
        try (PreparedStatement ps = conn.prepareStatement("SELECT id::text FROM orders WHERE id = ?")) {
            ps.setLong(1, id);
            try (ResultSet rs = ps.executeQuery()) {
                rs.next();
                text = rs.getString(1);
            }
        }
        check(body.equals("{\"id\":" + text + ",\"customer\":\"ada\"}"), "the body " + body + " vs " + text);
        check(Long.toString((long) idAsDouble(body)).equals(text), "the body read as a double vs " + text);
        String serverJson;
        try (PreparedStatement ps = conn.prepareStatement("SELECT snowflake_json(?)::text")) {
            ps.setLong(1, id);
            try (ResultSet rs = ps.executeQuery()) {
                rs.next();
                serverJson = rs.getString(1);
            }
        }
        check((long) idAsDouble(serverJson) == id, "snowflake_json " + serverJson + " read as a double");
        List<Long> ids = new ArrayList<>();
        try (PreparedStatement ps = conn.prepareStatement(
                "INSERT INTO orders (customer) SELECT unnest(?::text[]) RETURNING id")) {
            ps.setArray(1, conn.createArrayOf("text", customers.toArray()));
            try (ResultSet rs = ps.executeQuery()) {
                while (rs.next()) ids.add(rs.getLong(1));
            }
        }
        check(ids.size() == customers.size(), ids.size() + " batch keys");
        List<String> stored = new ArrayList<>();
        try (Statement st = conn.createStatement();
                ResultSet rs = st.executeQuery("SELECT id::text FROM orders WHERE customer <> 'ada' ORDER BY id")) {
            while (rs.next()) stored.add(rs.getString(1));
        }
        for (int i = 0; i < ids.size(); i++) {
            if (i > 0) check(ids.get(i - 1) < ids.get(i), "batch keys not increasing at " + i);
            String json = "{\"id\":" + ids.get(i) + "}";
            check(Long.toString((long) idAsDouble(json)).equals(stored.get(i)), "batch key " + i + " through a double");
        }
        System.out.println("pgjdbc on js53: 1 key and " + ids.size() + " batch keys written into JSON as numbers, "
                + "every digit the stored one read back as a double; snowflake_json read alike");
    }
}
